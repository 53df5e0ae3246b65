"""R2 (driver side), R3, R4, R8, R10: the driver dies mid-commit, state files tear, two drivers race."""

import contextlib
import json
import os
import shutil
import signal
import threading
import time

import psutil
import pytest

import trainkit
from trainkit import DataParallelTrainer, RunLockedError, ScalingConfig
from trainkit._internal.storage.run_state import CheckpointRecord, RunState
from trainkit._internal.storage.run_storage import RunStorage
from trainkit.testing import subprocesses


@pytest.mark.parametrize("phase, resumes_at", [
    ("before_commit", 2), ("before_rename", 2),  # checkpoint 2 never committed: resume after 1
    ("before_state", 3), ("before_retention", 3),  # committed (manifest in place): resume after 2
])
def test_r2_r8_driver_killed_in_each_commit_phase(tmp_path, run_driver, check_run_dir, figure, phase, resumes_at):
    storage = str(tmp_path)
    first = run_driver(storage, "run", 5, env={"TRAINKIT_FAULT_POINT": f"{phase}:index=2"}, num_to_keep=2)
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    second = run_driver(storage, "run", 5, num_to_keep=2)
    assert second.returncode == 0, second.stderr[-3000:]
    start = json.loads(second.stdout.strip().splitlines()[-1])["start"]
    state = check_run_dir(os.path.join(storage, "run"))
    kept = sorted(c["name"] for c in state["checkpoints"])
    figure("R2" if phase != "before_retention" else "R8",
           f"driver SIGKILL {phase.replace('_', ' ')} of checkpoint 2: rerun resumed at step {start} "
           f"(expected {resumes_at}); temp dirs 0; kept {kept} all verify")
    assert start == resumes_at
    assert len(kept) <= 3  # num_to_keep=2, plus the checkpoint the rerun resumed from


def test_r3_torn_state_is_never_unrestorable(tmp_path, figure):
    storage = RunStorage(str(tmp_path), "run")
    storage.preflight()
    for index in range(3):  # three commits, each followed by a state write
        os.makedirs(storage.path(f"checkpoint_{index:06d}"))
        with open(storage.path(f"checkpoint_{index:06d}", ".manifest.json"), "w") as f:
            json.dump({"name": f"checkpoint_{index:06d}", "index": index, "attempt": 0, "metrics": {}, "files": {}}, f)
        RunState("run", next_report_index=index + 1,
                 checkpoints=[CheckpointRecord(f"checkpoint_{i:06d}", i, 0, {}) for i in range(index + 1)],
                 latest_checkpoint=f"checkpoint_{index:06d}").save(storage)
    good = open(storage.path("run_state.json"), "rb").read()
    recovered = 0
    for offset in range(0, len(good), max(1, len(good) // 20))[:20]:
        with open(storage.path("run_state.json"), "wb") as f:
            f.write(good[:offset])
        state = RunState.recover(storage)
        recovered += state is not None and state.latest_checkpoint == "checkpoint_000002"
    figure("R3", f"{recovered}/20 truncations of run_state.json recovered to the last commit "
                 "(previous copy + manifests; Ray Train 2.60: unrestorable)")
    assert recovered == 20


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_r4_driver_killed_then_rerun_resumes_without_orphans(tmp_path, run_driver, figure, sig):
    storage = str(tmp_path)
    proc = run_driver(storage, "run", 30, wait=False, sleep=0.2)
    metrics = os.path.join(storage, "run", "metrics.jsonl")
    deadline = time.monotonic() + 300  # a guard against a hang, not a speed
    while not (os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 4):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else "slow"
        time.sleep(0.1)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(sig)
    proc.wait()
    killed_at = time.monotonic()
    def left() -> list[int]:
        running = []
        for child in children:
            try:
                if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                    running.append(child.pid)
            except psutil.NoSuchProcess:  # gone meanwhile
                pass
        return running

    while left() and time.monotonic() - killed_at < 60:  # a guard: they go within seconds
        time.sleep(0.2)
    orphans = left()
    gone_s = time.monotonic() - killed_at
    committed = RunState.recover(RunStorage(storage, "run")).latest_checkpoint
    second = run_driver(storage, "run", 30)
    assert second.returncode == 0, second.stderr[-3000:]
    start = json.loads(second.stdout.strip().splitlines()[-1])["start"]
    figure("R4", f"driver {sig.name} with {len(children)} descendants: orphans after {gone_s:.1f} s: {len(orphans)}; "
                 f"rerun resumed at step {start} after {committed}")
    assert not orphans
    assert start == int(committed.split("_")[1]) + 1


def test_r10_second_driver_on_same_run_fails_fast(ray_cluster, run_config, figure):
    config = run_config(name="locked")
    release = threading.Event()

    def wait_for_release():
        trainkit.report({"waiting": True})
        while not os.path.exists(os.path.join(config.storage_path, "release")):
            time.sleep(0.05)

    first = threading.Thread(target=lambda: DataParallelTrainer(
        wait_for_release, scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 0.5}),
        run_config=config).fit())
    first.start()
    lock = os.path.join(config.storage_path, "locked", ".lock")
    while not os.path.exists(lock):
        time.sleep(0.05)
    start = time.monotonic()
    try:
        with pytest.raises(RunLockedError, match="another driver"):
            DataParallelTrainer(wait_for_release, run_config=config).fit()
        elapsed = time.monotonic() - start
    finally:  # whatever the second driver did, the first finishes: the module's next tests need the cluster
        open(os.path.join(config.storage_path, "release"), "w").close()
        release.set()
        first.join(60)
    figure("R10", f"second driver on the same run rejected in {elapsed * 1000:.0f} ms with RunLockedError; "
                  "the first finished normally")
    assert elapsed < 30 and not os.path.exists(lock)  # the first driver waits until released: not queued behind it


# -- stop signals: SIGTERM (Kubernetes, to pid 1), the same to the whole process group (Slurm), SIGHUP --


def _run_processes(marker: str) -> list[psutil.Process]:
    """Every process whose command line or environment names ``marker`` (this run's own TMPDIR)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid != os.getpid() and (any(marker in a for a in p.info["cmdline"] or ())
                                         or p.environ().get("TMPDIR") == marker):
                found.append(p)
        except psutil.Error:
            continue
    return found


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def signalled_driver(tmp_path):
    """Start ``_driver.py`` as ``subprocesses.start`` does (a session of its own, default signals),
    with its own TMPDIR (so its embedded Ray's processes are found by it, also once they left its
    tree); always kill whatever of it is left."""
    import subprocess
    import sys
    import tempfile

    run_tmp = tempfile.mkdtemp(prefix="tk")  # short: Ray's unix sockets live below it
    procs: list = []

    def start(name: str, steps: int, env: dict | None = None, **options):
        args = [sys.executable, os.path.join(os.path.dirname(__file__), "_driver.py"), str(tmp_path), name, str(steps), json.dumps(options)]
        full_env = {**os.environ, "TRAINKIT_VERBOSE": "0", "TMPDIR": run_tmp, **(env or {})}
        full_env.pop("RAY_ADDRESS", None)
        proc = subprocesses.start(args, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        return proc

    start.tmp = run_tmp
    yield start
    for proc in procs:
        subprocesses.end(proc)
    for p in _run_processes(run_tmp):
        with contextlib.suppress(psutil.Error):
            p.kill()
    shutil.rmtree(run_tmp, ignore_errors=True)


def _wait_for_commit(proc, run_path: str) -> None:
    """Until the driver has committed a checkpoint (its metrics line names one)."""
    metrics = os.path.join(run_path, "metrics.jsonl")
    while True:
        assert proc.poll() is None, proc.communicate()
        if os.path.exists(metrics) and any(json.loads(line).get("checkpoint")
                                           for line in open(metrics) if line.endswith("\n")):
            return
        time.sleep(0.05)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig, target, num_workers", [
    (signal.SIGTERM, "pid", 2), (signal.SIGTERM, "group", 2), (signal.SIGHUP, "group", 2),
    (signal.SIGTERM, "pid", 0), (signal.SIGINT, "group", 2),  # the terminal's Ctrl-C reaches the whole group
], ids=["SIGTERM-pid", "SIGTERM-group", "SIGHUP-group", "SIGTERM-local", "SIGINT-group"])
def test_r4_stop_signal_takes_the_ctrl_c_path(tmp_path, signalled_driver, check_run_dir, figure, sig, target,
                                              num_workers):
    run_path = os.path.join(str(tmp_path), "run")
    proc = signalled_driver("run", 10_000, sleep=0.05, num_workers=num_workers)
    _wait_for_commit(proc, run_path)
    running = _run_processes(signalled_driver.tmp)
    assert len(running) >= (1 if num_workers == 0 else 5), running  # driver, watchdog, GCS, raylet, workers
    sent = time.monotonic()
    if target == "pid":
        os.kill(proc.pid, sig)
    else:
        os.killpg(proc.pid, sig)
    _, stderr = proc.communicate(timeout=300)
    stopped_s = time.monotonic() - sent
    lines = [line for line in stderr.splitlines() if line.startswith("trainkit:")]
    assert proc.returncode == 128 + sig, stderr[-3000:]
    assert len(lines) == 1 and f"interrupted ({sig.name if sig != signal.SIGINT else 'Ctrl-C'})" in lines[0], stderr
    assert "*** SIG" not in stderr and "Stack trace" not in stderr and "Traceback" not in stderr, stderr[-3000:]
    state = check_run_dir(run_path)  # whole checkpoints only, each verifies, no temporary dirs
    assert state["status"] == "interrupted" and state["latest_checkpoint"], state
    assert not os.path.exists(os.path.join(run_path, ".lock"))
    # what outlived the driver ends within moments (its watchdog's kill), not never: waited for, not timed
    _, left = psutil.wait_procs(_run_processes(signalled_driver.tmp), timeout=60)
    left = [p for p in left if _alive(p)]
    assert not left, [(p.pid, p.cmdline()) for p in left]
    again = signalled_driver("run", 0, num_workers=num_workers)  # the lock was released: starts at once
    _, again_err = again.communicate(timeout=300)
    assert again.returncode == 0, again_err[-3000:]
    figure("R4", f"{sig.name} to the driver's {target} ({num_workers or 'local'} workers): exit "
                 f"{proc.returncode} after {stopped_s:.1f} s, one line, state interrupted at "
                 f"{state['latest_checkpoint']}, 0 of {len(running)} processes left, lock released")


@pytest.mark.timeout(600)
def test_r4_stop_signal_inside_a_commit_waits_for_it(tmp_path, signalled_driver, check_run_dir, figure):
    """SIGTERM arrives between a checkpoint's manifest and its rename: the commit completes first."""
    run_path = os.path.join(str(tmp_path), "run")
    proc = signalled_driver("run", 10_000, env={"TRAINKIT_FAULT_POINT": "before_rename:index=2",
                                                "TRAINKIT_FAULT_SIGNAL": "SIGTERM"})
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    state = check_run_dir(run_path)
    figure("R4", f"SIGTERM inside the commit of checkpoint 2: it committed whole ({state['latest_checkpoint']}), "
                 f"state {state['status']}")
    assert state["status"] == "interrupted" and state["latest_checkpoint"] == "checkpoint_000002", state


@pytest.mark.timeout(600)
def test_r4_users_own_sigterm_handler_stays_in_force(tmp_path, signalled_driver):
    run_path = os.path.join(str(tmp_path), "run")
    proc = signalled_driver("run", 10_000, own_sigterm_handler=7)
    _wait_for_commit(proc, run_path)
    os.kill(proc.pid, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 7, stderr[-3000:]  # the user's handler ran, not trainkit's nor Ray's
    assert "interrupted" not in stderr and not os.path.exists(os.path.join(run_path, ".lock")), stderr[-3000:]
