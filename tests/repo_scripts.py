"""How the tests run the repository's scripts as a user would: ``examples/<name>.py``, and Ray Train's
scripts (tests/ray_train_scripts/) after ``trainkit migrate``. Shared by tests/ and by the plugin sessions
that keep their framework out of the shared environment (packages/hf/tests, packages/tf/tests);
pyproject's ``pythonpath`` makes it importable in every session."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from trainkit.testing import subprocesses

EXAMPLES = Path(__file__).parents[1] / "examples"
SCRIPTS = Path(__file__).parent / "ray_train_scripts"


def migrate(*paths: Path) -> None:
    """``trainkit migrate --write`` on ``paths``; it must rewrite everything."""
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", "migrate", "--write", *map(str, paths)],
                           capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and not out.stderr, out.stderr


def ray_train_uses(source: str) -> list[str]:
    """The ``ray.train`` imports and attribute chains left in ``source``."""
    left = []
    for node in ast.walk(ast.parse(source)):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else
                 [ast.unparse(node)] if isinstance(node, ast.Attribute) else [])
        left += [name for name in names if (name + ".").startswith("ray.train.")]
    return left


def run_script(script: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``script`` in its own folder, its runs under ``results`` beside it, with a ``HOME`` beside it
    too: a Ray Tune script without a ``storage_path`` writes ``~/ray_results``, which must not be the
    user's (the caches stay the user's: ``XDG_CACHE_HOME``, ``KERAS_HOME``)."""
    home = script.parent / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "TRAINKIT_STORAGE_PATH": str(script.parent / "results"), "TRAINKIT_VERBOSE": "0",
           "HOME": str(home)}
    env.setdefault("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
    env.setdefault("KERAS_HOME", os.path.expanduser("~/.keras"))
    return subprocesses.run([sys.executable, script.name, *args], env=env, capture_output=True, text=True,
                            timeout=240, cwd=script.parent)


def run_migrated_script(name: str, tmp_path: Path) -> str:
    """``ray_train_scripts/<name>.py`` migrated by ``trainkit migrate`` and run in ``tmp_path`` (its runs
    under ``tmp_path/results``); its stdout."""
    script = tmp_path / f"{name}.py"
    shutil.copy(SCRIPTS / f"{name}.py", script)
    migrate(script)
    assert ray_train_uses(script.read_text()) == []
    out = run_script(script)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def run_example(name: str, storage: Path, timeout_s: float = 300) -> str:
    """Run ``examples/<name>.py`` with its runs under ``storage``; its stdout."""
    out = subprocesses.run([sys.executable, str(EXAMPLES / f"{name}.py")], capture_output=True, text=True,
                           timeout=timeout_s, env={**os.environ, "TRAINKIT_STORAGE_PATH": str(storage)})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
