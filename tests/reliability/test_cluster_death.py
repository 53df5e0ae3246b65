"""The run's own embedded cluster dying (issue 44 item 3).

The promise (docs/fault-tolerance-and-storage.md): when the embedded cluster's GCS or raylet ends,
the attempt fails at once naming the process and how it ended, no retry is spent (every worker
went with it), and the run is recorded ``failed`` before Ray can end the driver process (it does,
60 s after losing its GCS, when the driver's main thread is stuck in a call to it). After a raylet's
death the driver lives on and its next ``fit()`` starts a fresh cluster.
"""

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

DRIVER = textwrap.dedent("""
    import json, os, sys, time
    import trainkit

    def train_fn(config):
        if trainkit.get_context().get_world_rank() == 0:
            open(config["marker"], "w").close()
        for step in range(config["steps"]):
            trainkit.report({"step": step})
            time.sleep(0.05)

    def fit(steps):
        return trainkit.DataParallelTrainer(
            train_fn, train_loop_config={"marker": sys.argv[2], "steps": steps},
            scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
            run_config=trainkit.RunConfig(name=sys.argv[3], storage_path=sys.argv[1], verbose=0,
                                          failure_config=trainkit.FailureConfig(max_failures=3))).fit()

    try:
        fit(10**6)
    except trainkit.TrainingFailedError as exc:
        print(json.dumps({"type": str(exc.error_type), "message": str(exc).splitlines()[0]}), flush=True)
    if sys.argv[4] == "again":
        print(json.dumps({"second": fit(3).metrics}), flush=True)  # a fresh embedded cluster
""")


def _end_while_training(tmp_path, processes, then: str, end_cluster, env=None):
    """Start the driver; once rank 0 trains, ``end_cluster(driver)``; the driver's exit status and
    output, and what ``end_cluster`` returned."""
    script, marker = tmp_path / "driver.py", tmp_path / "started"
    script.write_text(DRIVER)
    driver = processes.start([sys.executable, str(script), str(tmp_path / "runs"), str(marker), "died", then],
                             env={**(env or os.environ), "TRAINKIT_VERBOSE": "0"}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240  # a guard, not a speed
    while not marker.exists():
        assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
        time.sleep(0.05)
    ended = end_cluster(driver)
    out, err = driver.communicate(timeout=300)
    return driver.returncode, out, err, ended


def _kill_while_training(tmp_path, processes, process: str, then: str):
    """SIGKILL the driver's embedded cluster's ``process`` once rank 0 trains; the driver's exit
    status, output, and the killed process's pid."""
    def kill(driver):
        [victim] = [p for p in psutil.Process(driver.pid).children() if process in " ".join(p.cmdline())]
        victim.send_signal(signal.SIGKILL)
        return victim.pid

    return _end_while_training(tmp_path, processes, then, kill)


def test_the_embedded_clusters_raylet_dying_fails_the_run_at_once_and_spares_the_driver(tmp_path, processes):
    returncode, out, err, pid = _kill_while_training(tmp_path, processes, "raylet", "again")
    assert returncode == 0, err
    failed, second = [json.loads(line) for line in out.strip().splitlines()[-2:]]
    assert failed["type"] == "ClusterDied", failed
    assert f"the embedded Ray cluster's raylet (pid {pid}) killed by SIGKILL" in failed["message"], failed
    state = json.load(open(tmp_path / "runs" / "died" / "run_state.json"))
    assert state["status"] == "finished" and len(state["failures"]) == 1, state["failures"]  # by the second fit
    assert state["failures"][0]["type"] == "ClusterDied" and state["failures"][0]["attempt"] == 0
    assert second == {"second": {"step": 2}}


def test_the_embedded_clusters_gcs_dying_is_recorded_before_ray_can_end_the_driver(tmp_path, processes):
    returncode, out, err, pid = _kill_while_training(tmp_path, processes, "gcs_server", "once")
    state = json.load(open(tmp_path / "runs" / "died" / "run_state.json"))
    assert state["status"] == "failed", (returncode, err)  # was: "running", no trainkit line
    [failure] = state["failures"]
    assert failure["type"] == "ClusterDied" and "gcs_server" in failure["message"], failure
    assert f"the embedded Ray cluster's gcs_server (pid {pid}) killed by SIGKILL" in err + out, err


def test_the_warm_clusters_end_during_a_fit_fails_the_run_at_once_and_spares_the_driver(tmp_path, processes):
    """``trainkit down`` (or its keeper dying) during a run on the warm cluster: Ray marks the one
    node dead before its raylet exits, so a rank's death comes first. It fails the run at once as
    ClusterDied, no retry spent on a cluster that cannot come back (the retry was left waiting in
    Ray until Ray ended the driver 60 s later, the run left "running"); the next fit runs embedded."""
    pytest.importorskip("trainkit_warm", reason="the warm cluster is trainkit-warm's")
    tmp = Path(tempfile.mkdtemp(prefix="tkw", dir="/tmp"))  # short: Ray's socket paths live under it
    env = {**{k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TRAINKIT_WARM")},
           "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    cli = [sys.executable, "-m", "trainkit.cli"]
    try:
        up = subprocess.run([*cli, "up", "--idle-timeout", "0", "--prewarm", "none", "--spares", "0"], env=env,
                            capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        returncode, out, err, _ = _end_while_training(
            tmp_path, processes, "again",
            lambda driver: subprocess.run([*cli, "down"], env=env, capture_output=True, timeout=300), env)
    finally:
        subprocess.run([*cli, "down"], env=env, capture_output=True, timeout=300)
        shutil.rmtree(tmp, ignore_errors=True)
    assert returncode == 0, err[-3000:]
    failed, second = [json.loads(line) for line in out.strip().splitlines()[-2:]]
    assert failed["type"] == "ClusterDied" and "warm Ray cluster" in failed["message"], failed
    state = json.load(open(tmp_path / "runs" / "died" / "run_state.json"))
    assert [f["type"] for f in state["failures"]] == ["ClusterDied"] and state["failures"][0]["attempt"] == 0
    assert second == {"second": {"step": 2}}
