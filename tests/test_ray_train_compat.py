"""A Ray Train script, changed only per docs/migrating-from-ray-train.md, runs on trainkit."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).parents[1] / "docs" / "migrating-from-ray-train.md"


def rewrites() -> list[tuple[str, str]]:
    block = DOC.read_text().split("<!-- rewrites -->")[1].split("<!-- /rewrites -->")[0]
    return re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|$", block, flags=re.M)


def migrate(source: str) -> str:
    for ray_text, trainkit_text in rewrites():
        source = source.replace(ray_text, trainkit_text)
    return source


def test_rewrite_table_is_parsed():
    assert ("from ray.train import", "from trainkit import") in rewrites()


def test_ray_train_torch_linear_example_runs_after_migration(tmp_path):
    import ray  # trainkit depends on ray, whose wheel ships Ray Train's examples

    example = Path(ray.__file__).parent / "train" / "examples" / "pytorch" / "torch_linear_example.py"
    migrated = migrate(example.read_text())
    assert "ray.train" not in migrated
    script = tmp_path / "torch_linear_example.py"
    script.write_text(migrated)
    env = {**os.environ, "TRAINKIT_STORAGE_PATH": str(tmp_path / "results"), "TRAINKIT_VERBOSE": "0"}
    out = subprocess.run([sys.executable, str(script), "--smoke-test"], env=env, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "'loss'" in out.stdout  # the script prints result.metrics
    runs = list((tmp_path / "results").iterdir())
    assert len(runs) == 1 and (runs[0] / "checkpoint_000002" / ".manifest.json").exists()


def run_migrated_script(name: str, tmp_path: Path) -> str:
    """Migrate ``ray_train_scripts/<name>.py`` by the table, run it (in ``tmp_path``, runs under
    ``tmp_path/results``) and return its stdout."""
    migrated = migrate((Path(__file__).parent / "ray_train_scripts" / f"{name}.py").read_text())
    assert "ray.train" not in migrated and "Ray" not in migrated.split('"""', 2)[2]  # the docstring aside
    script = tmp_path / f"{name}.py"
    script.write_text(migrated)
    env = {**os.environ, "TRAINKIT_STORAGE_PATH": str(tmp_path / "results"), "TRAINKIT_VERBOSE": "0"}
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.parametrize("framework", ["xgboost", "lightgbm"])
def test_ray_train_gbdt_scripts_run_after_migration(tmp_path, framework):
    stdout = run_migrated_script(f"{framework}_breast_cancer", tmp_path)
    assert "rounds: 20" in stdout and "'loss'" in stdout
    run = tmp_path / "results" / f"{framework}_breast_cancer"
    assert len(list(run.glob("checkpoint_*/.manifest.json"))) == 4  # rounds 5, 10, 15, 20


def test_ray_train_lightning_script_runs_after_migration(tmp_path):
    stdout = run_migrated_script("lightning_digits", tmp_path)
    assert "epochs: 3" in stdout and "'loss'" in stdout
    run = tmp_path / "results" / "lightning_digits"
    assert len(list(run.glob("checkpoint_*/checkpoint.ckpt"))) == 3


def test_ray_train_transformers_script_runs_after_migration(tmp_path):
    stdout = run_migrated_script("transformers_text", tmp_path)
    assert "epochs: 3" in stdout and "'loss'" in stdout
    run = tmp_path / "results" / "transformers_text"
    assert len(list(run.glob("checkpoint_*/trainer_state.json"))) == 3  # one per epoch, 4 steps each


@pytest.mark.parametrize("name", ["torch_batchnorm_getting_started", "lightning_getting_started",
                                  "lightgbm_arrow_frame", "xgboost_checkpoint_name"])
def test_ray_train_doc_style_scripts_run_after_migration(tmp_path, name):
    """Each script asserts its own outcome (checkpoint reloaded by Ray's idiom) and exits 0."""
    assert "metrics:" in run_migrated_script(name, tmp_path)
