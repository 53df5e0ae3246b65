"""`trainkit launch` runs an unmodified torchrun DDP script (examples/torchrun_ddp.py) on 2 workers,
and restarts it when a rank exits with an error."""

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[1] / "examples" / "torchrun_ddp.py"


def test_torchrun_script_runs_unchanged_and_restarts(tmp_path):
    out = subprocess.run([sys.executable, "-m", "trainkit.cli", "launch", "--nproc", "2", "--cpus-per-worker", "0.5",
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
