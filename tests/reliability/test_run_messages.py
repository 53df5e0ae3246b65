"""What a failing or interrupted run says: a stuck DDP run names the rank that is not waiting in a
collective; a refused `trainkit launch` speaks its flags; the Ctrl-C line names the checkpoint the
next run resumes from."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import trainkit
from trainkit import FailureConfig, ScalingConfig, TrainingFailedError
from trainkit.testing import subprocesses

TWO = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})


def rank_one_stays_out_while_rank_zero_all_reduces(config):
    import torch
    import torch.distributed as dist

    trainkit.report({"step": 0})
    if trainkit.get_context().get_world_rank() == 1:
        if config["rank_1"] == "sleeps":
            time.sleep(3600)  # asleep in user code
        for step in range(1, 10**6):  # busy in user code: its clock never passes the timeout
            trainkit.report({"step": step})
            time.sleep(0.1)
    dist.all_reduce(torch.ones(1))  # rank 0 waits here for rank 1


@pytest.mark.parametrize("rank_1", ["sleeps", "reports"])
def test_stuck_ddp_names_the_rank_not_in_a_collective(ray_cluster, run_config, rank_1):
    """The rank named is the one its peers wait for, whether its own clock passed the timeout (asleep),
    not yet (it went quiet a moment after them, as on a loaded machine), or never (it runs on)."""
    pytest.importorskip("trainkit_torch")
    from trainkit_torch import TorchConfig, TorchTrainer

    config = run_config(failure_config=FailureConfig(max_failures=0, progress_timeout_s=3))
    with pytest.raises(TrainingFailedError) as caught:
        TorchTrainer(rank_one_stays_out_while_rank_zero_all_reduces, train_loop_config={"rank_1": rank_1},
                     torch_config=TorchConfig(backend="gloo"), scaling_config=TWO, run_config=config).fit()
    state = json.load(open(os.path.join(config.storage_path, config.name, "run_state.json")))
    failure = state["failures"][0]
    assert failure["type"] == "WorkerStuck" and failure["rank"] == 1, failure
    assert "rank 1" in failure["message"] and "not in a collective" in failure["message"], failure["message"]
    assert "rank 0" in failure["message"] and "waiting in a collective" in failure["message"]
    assert "time.sleep" in str(caught.value) or "in rank_one_stays_out" in str(caught.value)


def test_ctrl_c_line_names_the_newest_committed_checkpoint(tmp_path, run_driver):
    from trainkit._internal.storage.run_storage import RunStorage

    for round in range(3):  # SIGINT lands at a different point of the commit cycle each time
        name = f"run{round}"
        proc = run_driver(str(tmp_path), name, 100000, wait=False, sleep=0)
        state_file = tmp_path / name / "run_state.json"
        while not (state_file.exists() and json.loads(state_file.read_text() or "{}").get("checkpoints")):
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 130, stderr[-3000:]
        newest = RunStorage(str(tmp_path), name).committed_checkpoints()[-1]["name"]
        assert f"to resume from {newest}" in stderr, (newest, stderr)


LAUNCHED = """
import os, sys, time
open(sys.argv[1] + ".started", "w").close()
while not os.path.exists(sys.argv[1] + ".go"):
    time.sleep(0.05)
"""


def test_second_launch_with_the_same_name_is_refused_naming_the_flag(tmp_path, processes):
    script, marker = tmp_path / "hold.py", str(tmp_path / "m")
    script.write_text(LAUNCHED)
    command = [sys.executable, "-m", "trainkit.cli", "launch", "--cpus-per-worker", "0.5", "--storage-path",
               str(tmp_path / "runs"), "--name", "twice", str(script), marker]
    first = processes.start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not os.path.exists(marker + ".started"):
            assert first.poll() is None, first.communicate()[1][-3000:]
            time.sleep(0.05)
        second = processes.run(command, capture_output=True, text=True, timeout=300)
    finally:
        open(marker + ".go", "w").close()
        first.communicate(timeout=300)
    assert second.returncode != 0
    assert "--name" in second.stderr and "RunConfig" not in second.stderr, second.stderr[-3000:]
    assert "Traceback" not in second.stderr, second.stderr[-3000:]


def test_ctrl_c_right_after_a_commit_names_that_checkpoint(tmp_path, run_driver):
    """SIGINT between a checkpoint's commit and the state naming it: the line names the commit."""
    proc = run_driver(str(tmp_path), "run", 100000, wait=False, sleep=0,
                      env={"TRAINKIT_FAULT_POINT": "after_commit:index=2", "TRAINKIT_FAULT_SIGNAL": "SIGINT"})
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    assert "to resume from checkpoint_000002" in stderr, stderr[-3000:]


def test_launch_with_an_invalid_name_names_the_flag(tmp_path):
    script = tmp_path / "noop.py"
    script.write_text("")
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", "launch", "--name", "../x", str(script)],
                           capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--name='../x' is invalid" in out.stderr, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
