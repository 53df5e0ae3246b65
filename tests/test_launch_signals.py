"""`trainkit launch` and torchrun side by side where schedulers and people touch the process tree: signals
to the launcher reach every rank as that signal (then SIGKILL after --shutdown-timeout), a failed
attempt's other ranks get SIGTERM before SIGKILL, ranks and what they start have an empty signal mask
and default dispositions, torchrun's environment contract (TORCHELASTIC_MAX_RESTARTS, the @record error
file) holds, and nothing of Ray's debugger settings reaches the script. Real processes, real signals."""

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

import trainkit
from trainkit._internal.worker.debugger import HOOK
from trainkit.testing import subprocesses

RANK_SCRIPT = textwrap.dedent('''
    import json, os, signal, subprocess, sys, time
    out, rank = sys.argv[1], os.environ["RANK"]

    def masks(pid):
        fields = dict(line.split(":\\t") for line in open(f"/proc/{pid}/status").read().splitlines() if ":\\t" in line)
        return {k: int(fields[k], 16) for k in ("SigBlk", "SigIgn")}

    def mark(name, **data):
        with open(os.path.join(out, f"{name}.tmp"), "w") as f:
            json.dump(data, f)
        os.replace(os.path.join(out, f"{name}.tmp"), os.path.join(out, name))

    child = subprocess.Popen(["sleep", "1000"])  # something the rank starts

    def on_signal(signum, frame):
        mark(f"signal_{rank}", signum=signum)
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)  # SIGINT keeps Python's default: KeyboardInterrupt
    mark(f"ready_{rank}", pid=os.getpid(), ppid=os.getppid(), child=child.pid, child_masks=masks(child.pid),
         sigint=str(signal.getsignal(signal.SIGINT)))
    try:
        while True:
            time.sleep(0.05)
    except KeyboardInterrupt:
        mark(f"signal_{rank}", signum=signal.SIGINT, keyboard_interrupt=True)
        sys.exit(0)
''')


def wait_for(paths, proc, what):
    """Until every path exists (the event), failing at once if ``proc`` ended first."""
    deadline = time.monotonic() + 300  # a bound on a hang, not a speed assumption
    while not all(os.path.exists(p) for p in paths):
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the launcher exited {proc.returncode} before {what}:\n{out[-2000:]}\n{err[-4000:]}")
        assert time.monotonic() < deadline, f"no {what} after 300 s"
        time.sleep(0.05)


def start(command, tmp_path, **kwargs):
    return subprocesses.start(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              **kwargs)


def launchers(tmp_path, script, *args, restarts=0, warm=None):
    """The same run under each: 2 ranks, ``restarts`` restarts after a failure, ``args`` for all; with
    ``warm`` (a warm cluster's TMPDIR) also trainkit on it, where the fork server starts the ranks."""
    def trainkit_launch(runs):
        return [sys.executable, "-m", "trainkit.cli", "launch", "--nproc", "2", "--cpus-per-worker", "0.5",
                "--storage-path", str(tmp_path / runs), "--max-failures", str(restarts), *args, str(script)]

    sides = {
        "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                     "--max-restarts", str(restarts), *args, str(script)],
        "trainkit": trainkit_launch("runs"),
    }
    if warm is not None:
        sides["trainkit warm"] = ["env", f"TMPDIR={warm}", *trainkit_launch("runs-warm")]
    return sides


@pytest.fixture(scope="module")
def warm_cluster():
    """A warm cluster (``trainkit up``) in a TMPDIR of its own (short: Ray's socket paths live under it),
    its fork server listening: only the "trainkit warm" side attaches to it. Stopped by ``trainkit down``.
    None (no such side) where trainkit-warm is not installed."""
    import importlib.util

    if importlib.util.find_spec("trainkit_warm") is None:
        yield None
        return
    tmp = Path(tempfile.mkdtemp(prefix="tkw", dir="/tmp"))
    env = {**os.environ, "TMPDIR": str(tmp)}
    up = subprocess.run([sys.executable, "-m", "trainkit.cli", "up", "--idle-timeout", "0", "--prewarm", "json",
                         "--spares", "0"], env=env, capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    try:
        socket = tmp / f"trainkit-{os.getuid()}" / "forkserver.sock"
        deadline = time.monotonic() + 120
        while not socket.exists():
            assert time.monotonic() < deadline, "the warm cluster's fork server did not start"
            time.sleep(0.05)
        yield tmp
    finally:
        subprocess.run([sys.executable, "-m", "trainkit.cli", "down"], env=env, capture_output=True, timeout=300)
        shutil.rmtree(tmp, ignore_errors=True)


def alive(pids):
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def ended(proc, descendants):
    """Wait for the launcher and everything it started (by the event: their exit; bounded)."""
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while alive(descendants) and time.monotonic() < deadline:
        time.sleep(0.1)
    return out, err, alive(descendants)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_a_signal_to_the_launcher_reaches_every_rank_as_that_signal_as_under_torchrun(tmp_path, sig, warm_cluster):
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    for name, command in launchers(tmp_path, script, warm=warm_cluster).items():
        out_dir = tmp_path / name.replace(" ", "_")
        out_dir.mkdir()
        proc = start([*command, str(out_dir)], tmp_path)
        try:
            wait_for([out_dir / f"ready_{r}" for r in (0, 1)], proc, f"{name}'s ranks were ready")
            ready = [json.loads((out_dir / f"ready_{r}").read_text()) for r in (0, 1)]
            descendants = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
            descendants += [pid for r in ready for pid in (r["pid"], r["child"])]  # the fork server's, when warm
            proc.send_signal(sig)
            out, err, left = ended(proc, descendants)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        for rank, seen in enumerate(ready):
            if name == "trainkit warm":  # forked by the warm cluster's fork server, not started by the worker
                assert psutil.pid_exists(seen["ppid"]) and "trainkit._internal.cluster.forkserver" in \
                    psutil.Process(seen["ppid"]).cmdline(), (seen, err[-3000:])
            assert seen["child_masks"] == {"SigBlk": 0, "SigIgn": 0}, (name, rank, seen)  # a rank's child
            assert seen["sigint"] == "<built-in function default_int_handler>", (name, rank, seen)
            marker = out_dir / f"signal_{rank}"
            assert marker.exists(), f"{name}: rank {rank}'s handler did not run\n{out[-2000:]}\n{err[-4000:]}"
            assert json.loads(marker.read_text())["signum"] == sig, (name, rank)
            if sig == signal.SIGINT:
                assert json.loads(marker.read_text())["keyboard_interrupt"]
        assert not left, f"{name} left {left} running"
        if name == "torchrun":
            assert proc.returncode == 1 and "SignalException" in err  # torchrun: 1 and a traceback
        else:
            assert proc.returncode == 128 + sig, err[-4000:]
            assert f"trainkit launch: {sig.name}: sent to all 2 ranks" in err, err[-4000:]
            assert "received at time=" not in err and "Traceback" not in err, err[-4000:]  # no Ray C++ dump
            runs = tmp_path / ("runs-warm" if name == "trainkit warm" else "runs")
            state = json.loads((runs / os.listdir(runs)[0] / "run_state.json").read_text())
            assert state["status"] == "interrupted" and state["failures"] == [], state


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_ctrl_c_to_the_launchers_process_group_reaches_every_forked_rank_as_that_signal(tmp_path, sig):
    """Ctrl-C in a terminal, or the terminal closing, signals the launcher's whole process group. On
    the embedded cluster the ranks' scripts are forked by its fork server, which is not in that group
    (a session of its own, as Ray's processes): the signal reaches each script once, from its rank,
    as a signal to the launcher alone does. (In the group, the server died of it and took the scripts
    with it, SIGKILLed before their handlers ran.)"""
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = start([*launchers(tmp_path, script)["trainkit"], str(out_dir)], tmp_path, env={**os.environ, "TRAINKIT_WARM": "0"})
    try:
        wait_for([out_dir / f"ready_{r}" for r in (0, 1)], proc, "the ranks were ready")
        ready = [json.loads((out_dir / f"ready_{r}").read_text()) for r in (0, 1)]
        for seen in ready:  # forked by the embedded cluster's fork server
            assert "trainkit._internal.cluster.forkserver" in psutil.Process(seen["ppid"]).cmdline(), seen
        descendants = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        descendants += [pid for r in ready for pid in (r["pid"], r["child"])]
        os.killpg(proc.pid, sig)
        out, err, left = ended(proc, descendants)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for rank in (0, 1):
        marker = out_dir / f"signal_{rank}"
        assert marker.exists(), f"rank {rank}'s handler did not run\n{out[-2000:]}\n{err[-4000:]}"
        assert json.loads(marker.read_text())["signum"] == sig, rank
    assert not left, f"left {left} running"
    assert proc.returncode == 128 + sig, err[-4000:]
    assert "Traceback" not in err, err[-4000:]


SURVIVOR_SCRIPT = textwrap.dedent('''
    import json, os, signal, sys, time
    out, rank = sys.argv[1], os.environ["RANK"]
    attempt, last = int(os.environ["TORCHELASTIC_RESTART_COUNT"]), int(os.environ["TORCHELASTIC_MAX_RESTARTS"])
    ready = os.path.join(out, f"ready_{attempt}")
    if rank == "0":
        def on_term(signum, frame):
            with open(os.path.join(out, f"term_{attempt}"), "w") as f:
                json.dump({"signum": signum, "t": time.time()}, f)
            if attempt < last:
                sys.exit(0)
            # the last attempt's survivor ignores it: only SIGKILL after the grace ends it
        signal.signal(signal.SIGTERM, on_term)
        open(ready, "w").close()
        while True:
            time.sleep(0.05)
    while not os.path.exists(ready):
        time.sleep(0.05)
    sys.exit(3)  # rank 1 fails every attempt once rank 0 has its handler
''')


def test_a_failed_attempts_other_ranks_get_sigterm_then_sigkill_after_the_grace_every_time(tmp_path):
    """3 attempts in a row (--max-failures 2): the surviving rank's SIGTERM handler runs every time, a restart's
    as the first's; in the last it ignores SIGTERM and is SIGKILLed no sooner than --shutdown-timeout later.
    torchrun sends the same signals, but SIGKILLs the last survivor after its own 30 s whatever
    --shutdown-timeout says (torch 2.13, measured): most of this test's time."""
    restarts = 2
    script = tmp_path / "survivor.py"
    script.write_text(SURVIVOR_SCRIPT)
    for name, command in launchers(tmp_path, script, "--shutdown-timeout", "3", restarts=restarts).items():
        out_dir = tmp_path / name
        out_dir.mkdir()
        proc = start([*command, str(out_dir)], tmp_path)
        out, err, _ = ended(proc, [])
        ended_at = time.time()
        terms = [json.loads((out_dir / f"term_{a}").read_text()) if (out_dir / f"term_{a}").exists() else None
                 for a in range(restarts + 1)]
        assert [t and t["signum"] for t in terms] == [signal.SIGTERM] * (restarts + 1), (name, terms, err[-4000:])
        assert ended_at - terms[-1]["t"] >= 3, name  # SIGKILL only after the grace
        if name == "trainkit":
            assert proc.returncode == 3, err[-4000:]
            assert err.count("restarting from scratch") == restarts, err[-4000:]


ENV_SCRIPT = textwrap.dedent('''
    import json, os, sys, time
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        with open(os.path.join(sys.argv[1], "env.tmp" + os.environ["RANK"]), "w") as f:
            json.dump(dict(os.environ), f)
        os.replace(f.name, os.path.join(sys.argv[1], "env_" + os.environ["RANK"]))
        if os.environ["RANK"] == "1":
            while not os.path.exists(os.path.join(sys.argv[1], "env_0")):  # rank 1's failure ends the attempt
                time.sleep(0.05)
            raise ValueError("bad batch 7 on rank 1")

    main()
''')

# Set by one launcher only, for reasons of its own: where it runs, not the contract.
OWN = {"torchrun": set(), "trainkit": {"TRAINKIT_LAUNCH_ADDRESS", "TRAINKIT_RANK", "TRAINKIT_VERBOSE", "NODE_RANK"}}


def test_torchruns_env_contract_and_the_record_error_file_no_ray_debugger(tmp_path):
    script = tmp_path / "env.py"
    script.write_text(ENV_SCRIPT)
    seen, errs = {}, {}
    for name, command in launchers(tmp_path, script).items():
        out_dir = tmp_path / name
        out_dir.mkdir()
        env = {**os.environ, "PYTHONBREAKPOINT": "my_debugger.set_trace", "RAY_DEBUG": "legacy"}
        proc = start([*command, str(out_dir)], tmp_path, env=env)
        _, errs[name], _ = ended(proc, [])
        assert proc.returncode == 1, errs[name][-4000:]
        seen[name] = [json.loads((out_dir / f"env_{r}").read_text()) for r in (0, 1)]
    torchrun, trainkit = seen["torchrun"][1], seen["trainkit"][1]
    ray_own = {k for k in trainkit if k.startswith("RAY_") or k in ("SPT_NOENV",)}
    # torchrun passes everything of its own environment on; trainkit drops Ray's debugger settings
    assert set(torchrun) - set(trainkit) == {"RAY_DEBUG"}, "torchrun sets these, trainkit launch does not"
    assert set(trainkit) - set(torchrun) - ray_own - OWN["trainkit"] == set()
    for key in ("TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE",
                "TORCHELASTIC_SIGNALS_TO_HANDLE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS",
                "PYTHONBREAKPOINT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "ROLE_NAME"):
        assert trainkit.get(key) == torchrun.get(key), key
    assert trainkit["PYTHONBREAKPOINT"] == "my_debugger.set_trace"  # the user's own, not Ray's
    assert not [k for k in trainkit if k.startswith("RAY_DEBUG")]
    assert seen["trainkit"][0]["TORCHELASTIC_ERROR_FILE"] != trainkit["TORCHELASTIC_ERROR_FILE"]  # one per rank
    # the failure names what @record wrote, as torchrun's summary does
    assert "ValueError: bad batch 7 on rank 1" in errs["torchrun"]
    assert "rank 1 raised ScriptExitError: env.py exited with status 1: ValueError: bad batch 7 on rank 1" \
        in errs["trainkit"], errs["trainkit"][-4000:]


def test_without_pythonbreakpoint_set_rays_debugger_does_not_reach_the_script(tmp_path):
    script = tmp_path / "env.py"
    script.write_text("import json, os, sys\njson.dump(dict(os.environ), open(sys.argv[1], 'w'))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", "launch", "--cpus-per-worker", "0.5",
                          "--storage-path", str(tmp_path / "runs"), str(script), str(tmp_path / "env.json")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads((tmp_path / "env.json").read_text())
    assert seen["PYTHONBREAKPOINT"] == HOOK and seen["TORCHELASTIC_MAX_RESTARTS"] == "0"  # trainkit's, not Ray's


REPORTS_ON_SIGTERM = textwrap.dedent('''
    import os, signal, sys, tempfile, time
    import trainkit
    out, rank = sys.argv[1], os.environ["RANK"]

    def on_term(signum, frame):  # the preemption pattern: checkpoint, then exit
        with tempfile.TemporaryDirectory() as tmp:
            open(os.path.join(tmp, "step"), "w").write("41")
            trainkit.report({"step": 41}, checkpoint=trainkit.Checkpoint.from_directory(tmp))
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)
    open(os.path.join(out, f"ready_{rank}"), "w").close()
    while True:
        time.sleep(0.05)
''')


def test_a_checkpoint_reported_in_the_sigterm_handler_is_committed_and_the_run_resumes_from_it(tmp_path):
    script = tmp_path / "preempted.py"
    script.write_text(REPORTS_ON_SIGTERM)
    proc = start(launchers(tmp_path, script)["trainkit"] + [str(tmp_path)], tmp_path)
    try:
        wait_for([tmp_path / f"ready_{r}" for r in (0, 1)], proc, "the ranks were ready")
        proc.send_signal(signal.SIGTERM)
        _, err, _ = ended(proc, [])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, err[-4000:]
    [run] = os.listdir(tmp_path / "runs")
    state = json.loads((tmp_path / "runs" / run / "run_state.json").read_text())
    assert state["status"] == "interrupted", state
    assert trainkit.Result.from_path(str(tmp_path / "runs" / run)).metrics == {"step": 41}
    assert (tmp_path / "runs" / run / state["latest_checkpoint"] / "step").read_text() == "41"
