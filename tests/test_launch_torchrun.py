"""`trainkit launch` runs an unmodified torchrun DDP script (examples/torchrun_ddp.py) on 2 workers,
and restarts it when a rank exits with an error."""

import json
import sys
from pathlib import Path

from trainkit.testing import subprocesses

EXAMPLE = Path(__file__).parents[1] / "examples" / "torchrun_ddp.py"


def test_torchrun_script_runs_unchanged_and_restarts(tmp_path):
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", "launch", "--nproc", "2", "--cpus-per-worker", "0.5",
                            "--max-failures", "1", "--name", "ddp", "--storage-path", str(tmp_path / "runs"),
                            str(EXAMPLE), "--epochs", "3", "--out", str(tmp_path / "out"),
                            "--crash-once", str(tmp_path / "crashed")], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    for rank in (0, 1):
        assert f"(rank {rank}) rank {rank}/2 local_rank {rank} epoch 0 loss" in out.stdout
        assert f"(rank {rank}) rank {rank}: resumed at epoch 1" in out.stdout  # the second attempt
        assert f"(rank {rank}) rank {rank}/2 local_rank {rank} epoch 2 loss" in out.stdout
    assert "attempt 0 failed (rank 1 raised ScriptExitError: torchrun_ddp.py exited with status 1)" in out.stderr
    state = json.loads((tmp_path / "runs" / "ddp" / "run_state.json").read_text())
    assert state["status"] == "finished" and state["attempt"] == 1
    assert [(f["rank"], f["type"]) for f in state["failures"]] == [(1, "ScriptExitError")]
    assert (tmp_path / "out" / "model.pt").exists()


RANK_0_ENDS_FIRST = """
import os
import time
import torch
import torch.distributed as dist


def running(pid):
    try:
        return "zombie" not in open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return False


pid_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_0_pid")
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    open(pid_file, "w").write(str(os.getpid()))
dist.barrier()
if dist.get_rank() == 1:
    while running(int(open(pid_file).read())):  # until rank 0's process has ended
        time.sleep(0.05)
    group = dist.new_group([1], use_local_synchronization=True)  # goes through the rendezvous store
    dist.all_reduce(torch.ones(1), group=group)
    print("rank 1 used the store after rank 0 ended")
dist.destroy_process_group()
"""


def test_the_rendezvous_store_outlives_rank_0s_script_as_under_torchrun(tmp_path):
    """torchrun's agent, not the script's rank 0, hosts the store (TORCHELASTIC_USE_AGENT_STORE): a rank
    may use it after rank 0's process ended, and rank 0's exit never tears down a server under the others."""
    script = tmp_path / "rank_0_ends_first.py"
    script.write_text(RANK_0_ENDS_FIRST)
    torchrun = subprocesses.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                                 str(script)], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert torchrun.returncode == 0, torchrun.stderr[-3000:]
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", "launch", "--nproc", "2", "--cpus-per-worker", "0.5",
                            "--storage-path", str(tmp_path / "runs"), str(script)],
                           capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "(rank 1) rank 1 used the store after rank 0 ended" in out.stdout
