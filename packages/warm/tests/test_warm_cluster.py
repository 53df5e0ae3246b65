"""The warm local cluster (``trainkit up`` / ``trainkit down``), with real processes: a fit in a fresh
process attaches to it (no Ray start of its own), sees an edit to the user's module made between two
runs, ``down`` leaves none of the cluster's processes alive, the idle timeout stops it by itself, and a
stale record (its keeper killed) falls back to the embedded start.

Each test gets its own HOME and TMPDIR (so its own private dir, record and Ray token): a warm cluster
started here is never seen by other tests or by anything else on the machine, and a fixture always
stops it by the pids recorded. Waits are on events, with generous bounds, never on speed."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

SRC = [str(Path(__file__).resolve().parents[2] / package / "src") for package in ("core", "warm")]

JOB = textwrap.dedent('''
    import json, sys
    import ray
    import trainkit
    from trainkit._internal.cluster import ray_runtime

    def train_fn():
        import os, usermod
        trainkit.report({"value": usermod.VALUE, "setting": os.environ.get("USER_SETTING", "")})

    result = trainkit.DataParallelTrainer(
        train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=trainkit.RunConfig(name=sys.argv[2], storage_path=sys.argv[1])).fit()
    print("RESULT " + json.dumps({"value": result.metrics["value"], "setting": result.metrics["setting"],
                                  "warm_address": getattr(ray_runtime.attached_cluster(), "address", None),
                                  "embedded": ray_runtime.embedded_node() is not None,
                                  "gcs_address": ray.get_runtime_context().gcs_address}), flush=True)
''')


@pytest.fixture
def warm_env(tmp_path_factory):
    """A private HOME and TMPDIR (short: Ray's socket paths live under it); stops whatever warm
    cluster a test started there, by the pids its record names, and checks none is left."""
    home = tmp_path_factory.mktemp("home")
    tmp = Path(tempfile.mkdtemp(prefix="tkw", dir="/tmp"))
    code = tmp_path_factory.mktemp("code")
    env = {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(SRC + [str(code)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    for name in ("RAY_ADDRESS", "TRAINKIT_WARM", "RAY_AUTH_MODE", "TRAINKIT_WARM_KEEPER"):
        env.pop(name, None)
    ctx = {"env": env, "tmp": tmp, "code": code, "private": tmp / f"trainkit-{os.getuid()}"}
    yield ctx
    record = _record(ctx)
    subprocess.run([sys.executable, "-m", "trainkit.cli", "down"], env=env, timeout=120, capture_output=True)
    if record is not None:  # down by pid, whatever the test did
        for pid in [record["keeper_pid"], *map(int, record["pids"])]:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
    for keeper in _keepers(ctx):  # and any keeper of this TMPDIR no record names (a failed test's)
        for proc in [keeper, *keeper.children(recursive=True)]:
            try:
                proc.kill()
            except psutil.Error:
                pass
    shutil.rmtree(tmp, ignore_errors=True)


def _keepers(ctx) -> list[psutil.Process]:
    """The keepers started with this test's TMPDIR."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "trainkit_warm.keeper" in (proc.info["cmdline"] or []) and \
                    proc.environ().get("TMPDIR") == str(ctx["tmp"]):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def _record(ctx) -> dict | None:
    try:
        return json.loads((ctx["private"] / "warm.json").read_text())
    except (OSError, ValueError):
        return None


def _cli(ctx, *args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainkit.cli", *args], env={**ctx["env"], **(env or {})},
                          timeout=timeout, capture_output=True, text=True)


def _fit(ctx, value: int, name: str, env: dict | None = None, stderr: bool = False):
    (ctx["code"] / "usermod.py").write_text(f"VALUE = {value}\n")
    script = ctx["code"] / "job.py"
    script.write_text(JOB)
    done = subprocess.run([sys.executable, str(script), str(ctx["tmp"] / "runs"), name],
                          env={**ctx["env"], **(env or {})}, timeout=300, capture_output=True, text=True,
                          cwd=ctx["code"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    return (result, done.stderr) if stderr else result


def _tree(record: dict) -> list[psutil.Process]:
    """The keeper, the cluster's processes and everything under them, as psutil processes."""
    found = []
    for pid in [record["keeper_pid"], *map(int, record["pids"])]:
        try:
            proc = psutil.Process(pid)
            found += [proc, *proc.children(recursive=True)]
        except psutil.Error:
            pass
    return found


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_up_fit_attaches_sees_edits_and_down_leaves_nothing(warm_env):
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--json")
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    assert record["address"].startswith("127.0.0.1:") and record["started_now"]
    assert (warm_env["private"] / "warm.json").stat().st_mode & 0o777 == 0o600
    assert warm_env["private"].stat().st_mode & 0o777 == 0o700
    again = json.loads(_cli(warm_env, "up", "--json").stdout)  # idempotent: the same cluster
    assert again["keeper_pid"] == record["keeper_pid"] and not again["started_now"]

    first = _fit(warm_env, 1, "first", env={"USER_SETTING": "mine"})
    assert first["value"] == 1 and first["setting"] == "mine"  # the driver's environment reaches its workers
    assert first["warm_address"] == record["address"] == first["gcs_address"]  # attached, no Ray start of its own
    assert not first["embedded"]
    second = _fit(warm_env, 2, "second")  # the user's module edited between the runs
    assert second["value"] == 2 and second["warm_address"] == record["address"]

    procs = _tree(record)
    assert len(procs) >= 3  # keeper, GCS, raylet at least
    down = _cli(warm_env, "down")
    assert down.returncode == 0 and "stopped" in down.stdout, down.stderr
    assert _wait_gone(procs, 30) == []
    assert not (warm_env["private"] / "warm.json").exists()
    assert "no warm cluster" in _cli(warm_env, "down").stdout


def test_two_ups_at_once_start_one_cluster(warm_env):
    command = [sys.executable, "-m", "trainkit.cli", "up", "--idle-timeout", "0", "--prewarm", "none",
               "--spares", "0", "--json"]
    ups = [subprocess.Popen(command, env=warm_env["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for _ in range(2)]
    outs = [up.communicate(timeout=180) for up in ups]
    assert [up.returncode for up in ups] == [0, 0], outs
    records = [json.loads(out) for out, _ in outs]
    assert len({r["keeper_pid"] for r in records}) == 1 and sorted(r["started_now"] for r in records) == [False, True]
    assert [p.pid for p in _keepers(warm_env)] == [records[0]["keeper_pid"]]


def test_up_when_one_is_up_says_which_asked_settings_it_has_otherwise(warm_env):
    assert _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--spares", "0").returncode == 0
    again = _cli(warm_env, "up", "--spares", "2", "--idle-timeout", "1h")
    assert again.returncode == 0 and "already up" in again.stderr + again.stdout
    assert "--idle-timeout 0.0; --spares 0: not what was asked" in again.stderr, again.stderr
    same = _cli(warm_env, "up", "--spares", "0")  # what it has, and nothing else asked
    assert "already up" in same.stderr + same.stdout and "not what was asked" not in same.stderr


def test_idle_timeout_stops_it(warm_env):
    up = _cli(warm_env, "up", "--idle-timeout", "3s", "--prewarm", "none", "--json")
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    procs = _tree(record)
    keeper = psutil.Process(record["keeper_pid"])
    keeper.wait(timeout=120)  # stops by itself, no driver having used it
    assert _wait_gone(procs, 30) == []
    assert not (warm_env["private"] / "warm.json").exists()
    assert "idle for 3 s" in (warm_env["private"] / "warm.log").read_text()


CLOCK_SHIM = textwrap.dedent('''
    # sitecustomize for the test below: this process's wall clock is shifted by the seconds in
    # TEST_CLOCK_STEP (an NTP step), and each of the keeper's polls leaves a mark in TEST_POLLS
    import os, sys, time
    _wall, _sleep = time.time, time.sleep

    def _shifted():
        try:
            with open(os.environ["TEST_CLOCK_STEP"]) as f:
                return _wall() + float(f.read())
        except (OSError, ValueError):
            return _wall()

    def _marked_sleep(seconds):
        if sys._getframe(1).f_code.co_filename.endswith("keeper.py"):
            with open(os.environ["TEST_POLLS"], "a") as f:
                f.write(".")
        _sleep(seconds)

    time.time, time.sleep = _shifted, _marked_sleep
''')


def test_a_wall_clock_step_does_not_end_the_idle_timeout(warm_env, tmp_path):
    """The idle timeout runs on a clock NTP does not step: the wall clock jumping an hour ahead
    leaves a warm cluster with a 10-minute timeout up."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(CLOCK_SHIM)
    step, polls = tmp_path / "step", tmp_path / "polls"
    env = {"PYTHONPATH": f"{shim}{os.pathsep}{warm_env['env']['PYTHONPATH']}",
           "TEST_CLOCK_STEP": str(step), "TEST_POLLS": str(polls)}
    up = _cli(warm_env, "up", "--idle-timeout", "10m", "--prewarm", "none", "--spares", "0", "--json", env=env)
    assert up.returncode == 0, up.stderr
    keeper = psutil.Process(json.loads(up.stdout)["keeper_pid"])

    def wait_for_polls(count: int) -> None:
        deadline = time.monotonic() + 120
        while not (polls.exists() and len(polls.read_text()) >= count):
            assert keeper.is_running() and keeper.status() != psutil.STATUS_ZOMBIE, "the keeper stopped"
            assert time.monotonic() < deadline, "the keeper did not poll"
            time.sleep(0.1)

    wait_for_polls(1)
    step.write_text("3600")
    wait_for_polls(len(polls.read_text()) + 3)  # three polls with the clock an hour ahead
    assert keeper.is_running() and keeper.status() != psutil.STATUS_ZOMBIE
    assert "idle for" not in (warm_env["private"] / "warm.log").read_text()


def test_the_idle_stop_waits_for_a_driver_between_its_look_and_its_connect(warm_env, tmp_path):
    """A driver found the record and is connecting (it holds the attach lock, shared, until it has
    connected and touched the used-file) at the very moment the idle timeout ends: the keeper does
    not stop the cluster under it; once the driver is through (here: it went elsewhere), it stops."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(CLOCK_SHIM)
    polls = tmp_path / "polls"
    env = {"PYTHONPATH": f"{shim}{os.pathsep}{warm_env['env']['PYTHONPATH']}", "TEST_POLLS": str(polls),
           "TEST_CLOCK_STEP": str(tmp_path / "no-step")}  # (the shim's clock, not stepped here)
    warm_env["private"].mkdir(mode=0o700)
    driver = os.open(warm_env["private"] / "warm.attach", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(driver, fcntl.LOCK_SH)  # from before `up`: however slow this machine, no idle stop first
        up = _cli(warm_env, "up", "--idle-timeout", "1s", "--prewarm", "none", "--spares", "0", "--json", env=env)
        assert up.returncode == 0, up.stderr
        keeper = psutil.Process(json.loads(up.stdout)["keeper_pid"])
        deadline, seen = time.monotonic() + 120, len(polls.read_text()) if polls.exists() else 0
        while not (polls.exists() and len(polls.read_text()) >= seen + 4):  # its 1 s timeout over at 2 of them
            assert keeper.is_running() and keeper.status() != psutil.STATUS_ZOMBIE, "it stopped under the driver"
            assert time.monotonic() < deadline, "the keeper did not poll"
            time.sleep(0.1)
        assert keeper.is_running() and keeper.status() != psutil.STATUS_ZOMBIE, "it stopped under the driver"
        assert (warm_env["private"] / "warm.json").exists()
    finally:
        os.close(driver)
    keeper.wait(timeout=120)
    assert "idle for 1 s" in (warm_env["private"] / "warm.log").read_text()


def test_stale_record_falls_back_to_the_embedded_start(warm_env):
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--json")
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    procs = _tree(record)
    os.kill(record["keeper_pid"], signal.SIGKILL)  # its watchdog reaps the cluster; the record stays
    assert _wait_gone(procs, 60) == []
    assert (warm_env["private"] / "warm.json").exists()
    result = _fit(warm_env, 3, "stale")
    assert result["value"] == 3 and result["warm_address"] is None and result["embedded"]
    assert not (warm_env["private"] / "warm.json").exists()  # the stale record was removed


def test_parse_duration():
    from trainkit_warm.record import parse_duration

    assert parse_duration("90") == 90 and parse_duration("30m") == 1800 and parse_duration("2h") == 7200
    assert parse_duration("0") == 0 and parse_duration("never") == 0
    with pytest.raises(ValueError):
        parse_duration("soon")


PIDS_JOB = textwrap.dedent('''
    import os, sys, time
    import trainkit

    PIDS, HOLD_S = sys.argv[3], float(sys.argv[4])

    def train_fn():
        import usermod  # the driver's directory: on the spare's sys.path once taken
        rank = trainkit.get_context().get_world_rank()
        with open(os.path.join(PIDS, f"{rank}.pid"), "w") as f:
            f.write(str(os.getpid()))
        with open(os.path.join(PIDS, f"{rank}.ppid"), "w") as f:
            f.write(str(os.getppid()))
        trainkit.report({"value": usermod.VALUE})
        time.sleep(HOLD_S)

    trainkit.DataParallelTrainer(
        train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=trainkit.RunConfig(name=sys.argv[2], storage_path=sys.argv[1], verbose=0)).fit()
''')


def _spares(record: dict) -> set[int]:
    """The pids of the keeper's spare workers: actor processes under the raylet."""
    raylet = psutil.Process(record["processes"]["raylet"][0])
    found = set()
    for proc in raylet.children():
        try:
            if proc.cmdline()[:1] == ["ray::Worker"]:
                found.add(proc.pid)
        except psutil.Error:
            pass
    return found


def _wait_for_spares(record: dict, count: int, timeout_s: float = 120) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while len(spares := _spares(record)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(spares) == count, spares
    return spares


# the user's module only from the driver's directory; spares on (CI's sessions turn them off)
SPARES_ENV = {"PYTHONPATH": os.pathsep.join(SRC), "TRAINKIT_SPARE_WORKERS": "1"}


def _start_pids_job(ctx, name: str, hold_s: float) -> tuple[subprocess.Popen, Path]:
    (ctx["code"] / "usermod.py").write_text("VALUE = 1\n")
    (ctx["code"] / "pids_job.py").write_text(PIDS_JOB)
    pids = ctx["tmp"] / f"pids-{name}"
    pids.mkdir()
    env = {**ctx["env"], **SPARES_ENV}
    proc = subprocess.Popen([sys.executable, "pids_job.py", str(ctx["tmp"] / "runs"), name, str(pids), str(hold_s)],
                            env=env, cwd=ctx["code"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, pids


def _worker_pids(pids: Path) -> set[int]:
    return {int(p.read_text()) for p in pids.glob("*.pid")}


def test_runs_take_the_keepers_spares_one_run_each(warm_env):
    """Issue 47: a fresh driver's workers are the keeper's spares (started before it, the driver's
    code found from its directory); the keeper starts new ones once the run is over; two drivers at
    once never share a spare."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--spares", "2", "--json",
              env=SPARES_ENV)
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    assert record["spares"] == 2
    spares = _wait_for_spares(record, 2)

    proc, pids = _start_pids_job(warm_env, "first", 0)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-3000:]
    assert _worker_pids(pids) == spares

    fresh = _wait_for_spares(record, 2)  # started again once no run holds the cluster's CPUs
    assert not fresh & spares
    runs = [_start_pids_job(warm_env, f"together{i}", 0) for i in range(2)]
    for proc, _ in runs:
        out = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, out[-3000:]
    taken = [_worker_pids(pids) & fresh for _, pids in runs]
    assert not taken[0] & taken[1] and taken[0] | taken[1] <= fresh


def test_the_clusters_workers_fork_from_its_fork_server_and_down_ends_them(warm_env):
    """The keeper's fork server forks the cluster's Python workers too (its spares, a run's own):
    they start with the prewarm modules imported; `down` leaves none of them running."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "json", "--spares", "2", "--json",
              env=SPARES_ENV)
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    server = _fork_server(warm_env, record)
    proc, pids = _start_pids_job(warm_env, "forked", 0)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-3000:]
    assert {int(p.read_text()) for p in pids.glob("*.ppid")} == {server.pid}
    forked = server.children()  # the spares started again since: forked too
    deadline = time.monotonic() + 120
    while len(forked) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
        forked = server.children()
    assert len(forked) >= 2
    procs = _tree(record)
    assert _cli(warm_env, "down").returncode == 0
    assert _wait_gone(procs, 30) == []


FOLLOW_CONFIG = textwrap.dedent('''
    from dataclasses import dataclass
    from typing import ClassVar
    from trainkit import BackendConfig

    def follow(loaded, wanted):
        pass

    @dataclass
    class FollowConfig(BackendConfig):  # a framework whose embedded cluster would fork from a server
        prewarm_modules: ClassVar = ("json",)
        follow_thread_count: ClassVar = staticmethod(follow)
''')

FOLLOW_JOB = textwrap.dedent('''
    import json, os, sys
    import trainkit
    from followcfg import FollowConfig

    def train_fn(config):
        import psutil
        servers = 0
        for child in psutil.Process(config["driver"]).children():
            try:
                servers += "trainkit._internal.cluster.forkserver" in child.cmdline()
            except psutil.Error:  # ended meanwhile
                pass
        trainkit.report({"driver_servers": servers, "ppid": os.getppid()})

    result = trainkit.DataParallelTrainer(
        train_fn, backend_config=FollowConfig(), train_loop_config={"driver": os.getpid()},
        scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=trainkit.RunConfig(name="follow", storage_path=sys.argv[1], verbose=0)).fit()
    print("RESULT " + json.dumps(result.metrics), flush=True)
''')


def test_a_fit_attached_to_it_starts_no_fork_server_of_its_own(warm_env):
    """A driver that will attach to the warm cluster does not start the fork server an embedded
    start would (``fork_server_ahead``: a second framework import beside the run, for nothing); its
    workers fork from the keeper's."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "json", "--json")
    assert up.returncode == 0, up.stderr
    server = _fork_server(warm_env, json.loads(up.stdout))
    (warm_env["code"] / "followcfg.py").write_text(FOLLOW_CONFIG)
    (warm_env["code"] / "follow_job.py").write_text(FOLLOW_JOB)
    done = subprocess.run([sys.executable, "follow_job.py", str(warm_env["tmp"] / "runs")], env=warm_env["env"],
                          cwd=warm_env["code"], timeout=300, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
    assert metrics["driver_servers"] == 0 and metrics["ppid"] == server.pid, metrics


def test_a_taken_spare_ends_with_the_driver_that_took_it(warm_env):
    """The keeper owns its spares, so Ray would keep one running after the driver that took it was
    SIGKILLed: it ends itself."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--spares", "2", "--json",
              env=SPARES_ENV)
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    spares = _wait_for_spares(record, 2)
    proc, pids = _start_pids_job(warm_env, "killed", 600)
    deadline = time.monotonic() + 300
    while len(_worker_pids(pids)) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = _worker_pids(pids)
    assert workers == spares, proc.stdout.read() if proc.poll() is not None else workers
    proc.kill()
    proc.wait()
    assert _wait_gone([psutil.Process(pid) for pid in workers], 60) == []


def _install_something(ctx) -> None:
    """What ``pip install --user`` does to site-packages: a new .pth in this test's user site."""
    user_site = subprocess.run([sys.executable, "-c", "import site; print(site.getusersitepackages())"],
                               env=ctx["env"], capture_output=True, text=True, check=True).stdout.strip()
    os.makedirs(user_site, exist_ok=True)
    Path(user_site, "installed.pth").write_text("")


def test_spares_started_before_a_pip_install_are_not_taken_and_are_replaced(warm_env):
    """A spare imported its modules before the install; a fresh process would import what was
    installed. The run's workers are new processes, and the keeper starts new spares."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--spares", "2", "--json",
              env=SPARES_ENV)
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    stale = _wait_for_spares(record, 2)
    _install_something(warm_env)
    proc, pids = _start_pids_job(warm_env, "after-install", 0)
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-3000:]
    assert not _worker_pids(pids) & stale
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in stale)  # asked, each ended itself
    assert not _wait_for_spares(record, 2) & stale


LAUNCHED = textwrap.dedent('''
    import os, sys
    import usermod  # beside the script: sys.path[0], as under python script.py
    print(f"RANK {os.environ['RANK']} PPID {os.getppid()} VALUE {usermod.VALUE} {os.environ.get('USER_SETTING')}",
          flush=True)
    sys.exit(usermod.EXIT)
''')


def _listening(ctx, record: dict, module: str, socket: str, but: int | None = None,
               timeout_s: float = 120) -> psutil.Process:
    """The keeper's child process running ``module`` (another than pid ``but``), once ``socket``
    in the private dir is there (it listens)."""
    keeper = psutil.Process(record["keeper_pid"])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in keeper.children():
            try:
                if module in proc.cmdline() and proc.pid != but and (ctx["private"] / socket).exists():
                    return proc
            except psutil.Error:
                pass
        time.sleep(0.1)
    raise AssertionError(f"the keeper started no {module}")


def _fork_server(ctx, record: dict, timeout_s: float = 120) -> psutil.Process:
    """The keeper's fork server, once it listens (a launch before that starts its ranks as fresh processes)."""
    return _listening(ctx, record, "trainkit._internal.cluster.forkserver", "forkserver.sock", timeout_s=timeout_s)


def test_launch_forks_each_rank_from_the_fork_server_and_sees_edits(warm_env):
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "json", "--spares", "0", "--json")
    assert up.returncode == 0, up.stderr
    server = _fork_server(warm_env, json.loads(up.stdout))
    script = warm_env["code"] / "launched.py"
    script.write_text(LAUNCHED)
    for value, code in ((1, 0), (2, 0), (3, 5)):  # the user's module edited between the launches
        (warm_env["code"] / "usermod.py").write_text(f"VALUE = {value}\nEXIT = {code}\n")
        done = _cli(warm_env, "launch", "--nproc", "2", "--name", f"forked{value}", str(script),
                    env={"USER_SETTING": f"set{value}"})  # the launcher's environment reaches the ranks
        assert done.returncode == code, done.stdout[-3000:] + done.stderr[-3000:]
        lines = [line.split("RANK ", 1)[1].split() for line in done.stdout.splitlines() if "RANK " in line]
        assert sorted(rank for rank, *_ in lines) == ["0", "1"], done.stdout
        assert {(ppid, got, setting) for _, _, ppid, _, got, setting in lines} == {(str(server.pid), str(value),
                                                                                     f"set{value}")}


def test_a_driver_whose_load_time_environment_differs_runs_without_it(warm_env):
    """The warm cluster's processes imported Python's and the framework's modules with the keeper's
    environment; a driver with another PYTHONHASHSEED (or TORCH_LOGS, ...) starts its own Ray."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--spares", "0", "--json")
    assert up.returncode == 0, up.stderr
    result, err = _fit(warm_env, 4, "hashseed", env={"PYTHONHASHSEED": "5"}, stderr=True)
    assert result["value"] == 4 and result["warm_address"] is None and result["embedded"]
    assert "not using the warm cluster: PYTHONHASHSEED='5' here, None where `trainkit up` ran" in err
    assert _fit(warm_env, 5, "same")["warm_address"] == json.loads(up.stdout)["address"]


def test_a_dead_fork_server_is_replaced_and_meanwhile_ranks_start_as_fresh_processes(warm_env):
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "json", "--spares", "0", "--json")
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    server = _fork_server(warm_env, record)
    (warm_env["private"] / "forkserver.sock").unlink()  # gone with it below: the next one's socket tells it listens
    server.kill()
    server.wait(timeout=60)
    script = warm_env["code"] / "launched.py"
    script.write_text(LAUNCHED)
    (warm_env["code"] / "usermod.py").write_text("VALUE = 1\nEXIT = 0\n")
    done = _cli(warm_env, "launch", "--nproc", "2", "--name", "no-server", str(script))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line.split("RANK ", 1)[1].split() for line in done.stdout.splitlines() if "RANK " in line]
    assert len(lines) == 2 and server.pid not in {int(ppid) for _, _, ppid, *_ in lines}  # fresh processes
    replaced = _fork_server(warm_env, record)  # the keeper starts another (at most every 10 s)
    assert replaced.pid != server.pid
    done = _cli(warm_env, "launch", "--nproc", "2", "--name", "new-server", str(script))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line.split("RANK ", 1)[1].split() for line in done.stdout.splitlines() if "RANK " in line]
    assert {int(ppid) for _, _, ppid, *_ in lines} == {replaced.pid}


def test_a_pip_install_during_a_launch_retires_the_fork_server_and_spares_the_running_script(warm_env):
    """The server forked a running launch's rank; site-packages changes; the next launch's rank starts
    fresh (the retired server serves no new request), the running one goes on to its end, and the
    keeper starts a new server."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "json", "--spares", "0", "--json")
    assert up.returncode == 0, up.stderr
    record = json.loads(up.stdout)
    server = _fork_server(warm_env, record)
    go = warm_env["tmp"] / "go"
    waiting = warm_env["code"] / "waiting.py"
    waiting.write_text(f"import os, time\nprint(f'WAITING PPID {{os.getppid()}}', flush=True)\n"
                       f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n")
    first = subprocess.Popen([sys.executable, "-m", "trainkit.cli", "launch", "--nproc", "1", "--name", "running",
                              str(waiting)], env=warm_env["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        line = next((line for line in first.stdout if "WAITING PPID" in line), "")
        assert line.split()[-1] == str(server.pid), first.stderr.read()[-3000:] if not line else line

        _install_something(warm_env)  # since the server started
        script = warm_env["code"] / "launched.py"
        script.write_text(LAUNCHED)
        (warm_env["code"] / "usermod.py").write_text("VALUE = 1\nEXIT = 0\n")
        done = _cli(warm_env, "launch", "--nproc", "1", "--name", "after-install", str(script))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        ppids = {line.split("PPID ")[1].split()[0] for line in done.stdout.splitlines() if "RANK " in line}
        assert ppids and str(server.pid) not in ppids  # a fresh process
        assert first.poll() is None and server.is_running()

        go.touch()
        assert first.wait(timeout=120) == 0, first.stderr.read()[-3000:]
    finally:
        first.kill()
    server.wait(timeout=60)  # retired, it ends with its last script
    replaced = _fork_server(warm_env, record)
    assert replaced.pid != server.pid


# -- a fit() handed to the keeper's standby driver (handoff.py) --------------------------------
HANDOFF_JOB = textwrap.dedent('''
    import dataclasses, json, os, sys, time
    import trainkit

    MARK, HOLD_S = sys.argv[3], float(sys.argv[4])

    @dataclasses.dataclass
    class Out:
        value: int

    def train_fn():
        import usermod
        rank = trainkit.get_context().get_world_rank()
        trainkit.report({"value": usermod.VALUE, "setting": os.environ.get("USER_SETTING", "")})
        if rank == 0:
            print("RANK ZERO LINE", flush=True)
            open(MARK, "w").close()
        time.sleep(HOLD_S)
        return Out(usermod.VALUE)

    class Copy:  # a script's own sys.stdout (a tee, a capture): what the run prints goes through it
        def __init__(self, stream):
            self.stream, self.seen = stream, []
        def write(self, text):
            self.seen.append(text)
            return self.stream.write(text)
        def __getattr__(self, name):
            return getattr(self.stream, name)

    if os.environ.get("COPY_STDOUT"):
        sys.stdout = Copy(sys.stdout)
    if os.environ.get("GO_FILE"):  # fit when told, at the same moment as another process
        print("READY", flush=True)
        while not os.path.exists(os.environ["GO_FILE"]):
            time.sleep(0.01)
    print("BEFORE FIT", flush=True)
    try:
        result = trainkit.DataParallelTrainer(
            train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
            run_config=trainkit.RunConfig(name=sys.argv[2], storage_path=sys.argv[1])).fit()
        out = {"value": result.metrics["value"], "setting": result.metrics["setting"],
               "returned": result.return_value == Out(result.metrics["value"])}  # the script's class
    except Exception as exc:
        out = {"error": type(exc).__name__, "message": str(exc)}
    if isinstance(sys.stdout, Copy):
        out["copied"] = "RANK ZERO LINE" in "".join(sys.stdout.seen)
    print("RESULT " + json.dumps({**out, "ray_imported": "ray" in sys.modules}), flush=True)
''')


def _spare_driver(ctx, up: subprocess.CompletedProcess, but: int | None = None) -> psutil.Process:
    """The keeper's standby driver once it listens (another than pid ``but``)."""
    return _listening(ctx, json.loads(up.stdout), "trainkit_warm.handoff", "driver.sock", but)


def _handoff_job(ctx, name: str, value: int = 1, hold_s: float = 0, env: dict | None = None) -> subprocess.Popen:
    (ctx["code"] / "usermod.py").write_text(f"VALUE = {value}\n")
    (ctx["code"] / "handoff_job.py").write_text(HANDOFF_JOB)
    return subprocess.Popen([sys.executable, "handoff_job.py", str(ctx["tmp"] / "runs"), name,
                             str(ctx["tmp"] / f"{name}.started"), str(hold_s)], cwd=ctx["code"],
                            env={**ctx["env"], **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _handoff_result(proc: subprocess.Popen) -> tuple[dict, str, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), out, err


def test_a_fit_in_a_process_without_ray_runs_in_the_spare_driver(warm_env):
    """The user's process hands its run to the spare: it never imports Ray, its environment and
    directory reach the workers, what the run prints comes on its stdout between its own lines,
    errors come back as raised; the spare ends after the run, and the keeper starts a new one."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--spares", "0", "--json")
    assert up.returncode == 0, up.stderr
    spare = _spare_driver(warm_env, up)
    result, out, err = _handoff_result(_handoff_job(warm_env, "handed", 1, env={"USER_SETTING": "mine"}))
    assert result == {"value": 1, "setting": "mine", "returned": True, "ray_imported": False}
    assert out.index("BEFORE FIT") < out.index("RANK ZERO LINE") < out.index("RESULT "), out
    assert "trainkit run handed: finished" in err
    deadline = time.monotonic() + 60  # ended, and reaped by the keeper (no zombie left while the next spare waits)
    while psutil.pid_exists(spare.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not psutil.pid_exists(spare.pid), spare

    spare = _spare_driver(warm_env, up, but=spare.pid)  # the user's module edited between the runs
    assert _handoff_result(_handoff_job(warm_env, "again", 2))[0] == {"value": 2, "setting": "", "returned": True,
                                                                      "ray_imported": False}

    _spare_driver(warm_env, up, but=spare.pid)  # storage that cannot be used: raised in the user's process
    (warm_env["tmp"] / "runs" / "a-file").write_text("")
    (warm_env["code"] / "handoff_job.py").write_text(HANDOFF_JOB.replace("storage_path=sys.argv[1]",
                                                                         "storage_path=sys.argv[1] + '/a-file'"))
    proc = subprocess.run([sys.executable, "handoff_job.py", str(warm_env["tmp"] / "runs"), "bad", "/dev/null", "0"],
                          cwd=warm_env["code"], env=warm_env["env"], capture_output=True, text=True, timeout=300)
    result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
    assert result["error"] == "StorageError" and "a-file" in result["message"] and not result["ray_imported"], result


def test_two_fits_at_once_each_run_once_one_of_them_in_the_spare_driver(warm_env):
    """Two processes fit at the same moment: the spare takes one run, and the other (queued behind
    it and refused, or finding its socket gone) runs its fit itself; each run ran once, with its own
    process's environment, and both finish."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--spares", "0", "--json")
    assert up.returncode == 0, up.stderr
    _spare_driver(warm_env, up)
    go = warm_env["tmp"] / "go"
    procs = [_handoff_job(warm_env, f"twin-{i}", 6, env={"USER_SETTING": f"twin {i}", "GO_FILE": str(go)})
             for i in range(2)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "READY", proc.communicate()
    go.touch()
    results = [_handoff_result(proc)[0] for proc in procs]
    assert [r["setting"] for r in results] == ["twin 0", "twin 1"] and all(r["value"] == 6 and r["returned"]
                                                                          for r in results), results
    print("ray imported by each:", [r["ray_imported"] for r in results])
    assert False in [r["ray_imported"] for r in results]  # one was handed off (the other too, if a new spare was quick)
    for i in range(2):
        metrics = (warm_env["tmp"] / "runs" / f"twin-{i}" / "metrics.jsonl").read_text().splitlines()
        assert len(metrics) == 1, metrics  # run once


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_stop_signal_to_the_users_process_stops_the_handed_off_run(warm_env, signum):
    """Ctrl-C or SIGTERM reach the spare running the run, which stops it as a driver of its own
    would (the run interrupted, one line, 128 + the signal); SIGKILL of the user's process ends the
    spare and with it the run's workers."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--spares", "0", "--json")
    assert up.returncode == 0, up.stderr
    spare = _spare_driver(warm_env, up)
    proc = _handoff_job(warm_env, "stopped", hold_s=600)
    started = warm_env["tmp"] / "stopped.started"
    deadline = time.monotonic() + 300
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert started.exists(), proc.communicate()
    workers = [child for child in psutil.Process(json.loads(up.stdout)["processes"]["raylet"][0]).children()
               if "Worker" in " ".join(child.cmdline())]
    assert workers
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == (-signal.SIGKILL if signum == signal.SIGKILL else 128 + signum), out + err
    if signum != signal.SIGKILL:
        assert "trainkit: run 'stopped' interrupted" in err, err
        state = json.loads((warm_env["tmp"] / "runs" / "stopped" / "run_state.json").read_text())
        assert state["status"] == "interrupted"
    assert _wait_gone([spare, *workers], 60) == []


def test_a_spare_driver_that_cannot_be_the_users_declines_and_the_fit_runs_here(warm_env):
    """A Ray setting the spare did not import Ray with: it declines before running anything, the
    fit attaches to the warm cluster from the user's process as before, and the keeper replaces it."""
    up = _cli(warm_env, "up", "--idle-timeout", "0", "--prewarm", "none", "--spares", "0", "--json")
    assert up.returncode == 0, up.stderr
    spare = _spare_driver(warm_env, up)
    result, _, _ = _handoff_result(_handoff_job(warm_env, "declined", 3, env={"RAY_DEDUP_LOGS": "0"}))
    assert result == {"value": 3, "setting": "", "returned": True, "ray_imported": True}
    assert _wait_gone([spare], 60) == []
    spare = _spare_driver(warm_env, up, but=spare.pid)
    # a script's own sys.stdout: not handed off (the spare would write around it), and the spare stays
    result, _, _ = _handoff_result(_handoff_job(warm_env, "copied", 4, env={"COPY_STDOUT": "1"}))
    assert result == {"value": 4, "setting": "", "returned": True, "copied": True, "ray_imported": True}
    assert spare.is_running() and spare.status() != psutil.STATUS_ZOMBIE
