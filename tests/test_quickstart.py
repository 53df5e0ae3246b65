"""The README's main job: examples/torch_quickstart.py, end to end on 2 CPU workers."""

import ast
import os
import re
import shlex
import sys
from pathlib import Path

from trainkit.testing import subprocesses

ROOT = Path(__file__).parents[1]
EXAMPLE = ROOT / "examples" / "torch_quickstart.py"


def quickstart_next(run: str, bin_dir: str) -> str:
    """noxfile.quickstart_next (nox itself is not installed where the tests run): its source, with the pins."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    wanted = [node for node in tree.body if (isinstance(node, ast.FunctionDef) and node.name == "quickstart_next")
              or (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "PINNED")]
    namespace: dict = {}
    exec(compile(ast.Module(wanted, type_ignores=[]), "noxfile.py", "exec"), namespace)
    return namespace["quickstart_next"](run, bin_dir)


def test_quickstart_trains_and_scores_above_90_percent(tmp_path):
    env = {**os.environ, "TRAINKIT_STORAGE_PATH": str(tmp_path)}
    out = subprocesses.run([sys.executable, str(EXAMPLE), "--name", "quick"], env=env, capture_output=True, text=True,
                           timeout=300)
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
    # the summary, `trainkit show` and Result (the example's get_best_checkpoint()) agree on the best
    assert "trainkit run quick: finished" in out.stderr
    shown = subprocesses.run([sys.executable, "-m", "trainkit.cli", "show", "quick"], env=env, capture_output=True,
                           text=True, check=True).stdout
    assert re.search(r"^best +(\S+) \(by val_accuracy, max", shown, re.M).group(1) == os.path.basename(best)

    # the session's last line: every command in it pastes as it is, about this run
    line = quickstart_next("quick", os.path.join(".nox", "quickstart", "bin"))
    commands = re.findall(r"`([^`]+)`", line)
    assert "<" not in line and not [c for c in commands if "/" in c.split()[0] and c.split()[0] != "source"]
    assert {c.split()[1] for c in commands if c.startswith("trainkit ")} == {"show", "plot", "runs"}
    assert "trainkit show quick" in commands and "pip install -e 'packages/core[plot]' -e packages/torch" in line
    bin_env = {**env, "PATH": os.pathsep.join([os.path.dirname(sys.executable), env["PATH"]])}
    for command in commands:
        if command.startswith("trainkit "):
            done = subprocesses.run(shlex.split(command), cwd=tmp_path, env=bin_env, capture_output=True, text=True)
            assert done.returncode == 0, (command, done.stderr)
    assert (tmp_path / "quick.png").stat().st_size > 10_000
