"""The README's main job: examples/torch_quickstart.py, end to end on 2 CPU workers."""

import os
import re
import sys
from pathlib import Path

from trainkit.testing import subprocesses

EXAMPLE = Path(__file__).parents[1] / "examples" / "torch_quickstart.py"


def test_quickstart_trains_and_scores_above_90_percent(tmp_path):
    env = {**os.environ, "TRAINKIT_STORAGE_PATH": str(tmp_path)}
    out = subprocesses.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    accuracy = float(re.search(r"held-out test accuracy: ([0-9.]+)", out.stdout).group(1))
    print(f"quickstart held-out accuracy: {accuracy:.3f}")
    assert accuracy > 0.9
    (run,) = tmp_path.iterdir()
    kept = sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint_"))
    assert len(kept) == 2  # CheckpointConfig(num_to_keep=2)
    assert "finished" in out.stderr and "Ray" not in out.stderr  # quiet: no Ray start-up chatter
    lines = [line.rstrip() for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == len(set(lines)), "no line (warning) printed twice"
    assert len([line for line in lines if line.startswith("trainkit: report ")]) == 8  # one per checkpoint
    best = re.search(r"^best +(\S+) +\(val_accuracy=", out.stderr, re.M).group(1)  # the summary's best row
    assert f"best checkpoint: {best}" in out.stdout
