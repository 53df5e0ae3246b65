"""Ray Train scripts run on trainkit after ``trainkit migrate``: every script in
tests/ray_train_scripts/ (each asserts its own success), and Ray's own torch_linear_example."""

import ast
import importlib.util
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from repo_scripts import SCRIPTS, migrate, ray_train_uses, run_script

NAMES = sorted(p.stem for p in SCRIPTS.glob("*.py"))


def missing_frameworks(script: Path) -> list[str]:
    """The top-level modules ``script`` imports that are not installed here (TensorFlow and Hugging
    Face keep out of the shared environment: packages/tf/tests and packages/hf/tests run their scripts)."""
    imported = {alias.name.split(".")[0] for node in ast.parse(script.read_text()).body
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.parse(script.read_text()).body
                 if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    return sorted(m for m in imported if importlib.util.find_spec(m) is None)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Path:
    """tests/ray_train_scripts/ migrated as a package (one command over the folder), one folder a script."""
    folder = tmp_path_factory.mktemp("ray_train_scripts")
    shutil.copytree(SCRIPTS, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    migrate(folder)
    for name in NAMES:
        (folder / name).mkdir()
        (folder / f"{name}.py").rename(folder / name / f"{name}.py")
    return folder


@pytest.fixture(scope="module")
def outcomes(request, migrated):
    """Each selected script's run (a future), started two at a time as the module begins: each
    starts its own Ray, and two starts overlap well on 2 cores. A str says why a script is skipped."""
    selected = [item.callspec.params["name"] for item in request.session.items
                if item.originalname == "test_ray_train_script_runs_after_migration"]
    pool = ThreadPoolExecutor(2)
    outcomes = {}
    for name in selected:
        script = migrated / name / f"{name}.py"
        missing = missing_frameworks(script)
        outcomes[name] = (f"not installed here: {', '.join(missing)}" if missing else pool.submit(run_script, script))
    yield outcomes
    pool.shutdown(cancel_futures=True)


def test_migrate_leaves_no_ray_train_in_the_scripts(migrated):
    for name in NAMES:
        assert ray_train_uses((migrated / name / f"{name}.py").read_text()) == [], name


@pytest.mark.parametrize("name", NAMES)
def test_ray_train_script_runs_after_migration(outcomes, name):
    if isinstance(outcomes[name], str):
        pytest.skip(outcomes[name])
    outcome = outcomes[name].result()
    assert outcome.returncode == 0, outcome.stdout[-2000:] + outcome.stderr[-4000:]


def run_migrated_script(name: str, tmp_path: Path) -> str:
    """``ray_train_scripts/<name>.py`` migrated by ``trainkit migrate`` and run in ``tmp_path`` (its runs
    under ``tmp_path/results``); its stdout. packages/tf/tests and packages/hf/tests run theirs through this."""
    script = tmp_path / f"{name}.py"
    shutil.copy(SCRIPTS / f"{name}.py", script)
    migrate(script)
    assert ray_train_uses(script.read_text()) == []
    out = run_script(script)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_ray_train_torch_linear_example_runs_after_migration(tmp_path):
    import ray  # trainkit depends on ray, whose wheel ships Ray Train's examples

    example = Path(ray.__file__).parent / "train" / "examples" / "pytorch" / "torch_linear_example.py"
    script = tmp_path / example.name
    shutil.copy(example, script)
    migrate(script)
    assert ray_train_uses(script.read_text()) == []
    out = run_script(script, "--smoke-test")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "'loss'" in out.stdout  # the script prints result.metrics
    runs = list((tmp_path / "results").iterdir())
    assert len(runs) == 1 and (runs[0] / "checkpoint_000002" / ".manifest.json").exists()
