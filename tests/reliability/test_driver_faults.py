"""R2 (driver side), R3, R4, R8, R10: the driver dies mid-commit, state files tear, two drivers race."""

import json
import os
import signal
import threading
import time

import psutil
import pytest

import trainkit
from trainkit import DataParallelTrainer, RunLockedError, ScalingConfig
from trainkit._internal.run_state import CheckpointRecord, RunState
from trainkit._internal.storage import RunStorage


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
    with pytest.raises(RunLockedError, match="another driver"):
        DataParallelTrainer(wait_for_release, run_config=config).fit()
    elapsed = time.monotonic() - start
    open(os.path.join(config.storage_path, "release"), "w").close()
    release.set()
    first.join(60)
    figure("R10", f"second driver on the same run rejected in {elapsed * 1000:.0f} ms with RunLockedError; "
                  "the first finished normally")
    assert elapsed < 30 and not os.path.exists(lock)  # the first driver waits until released: not queued behind it
