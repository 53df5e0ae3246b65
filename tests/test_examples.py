"""The GBDT, Lightning, JAX and Tune examples, end to end on 2 CPU workers."""

import re

import pytest

from repo_scripts import run_example


@pytest.mark.parametrize("name", ["xgboost_breast_cancer", "lightgbm_breast_cancer"])
def test_gbdt_example_trains_and_scores(tmp_path, name):
    stdout = run_example(name, tmp_path)
    assert "rounds: 40" in stdout
    accuracy = float(re.search(r"held-out test accuracy: ([0-9.]+)", stdout).group(1))
    print(f"{name} held-out accuracy: {accuracy:.3f}")
    assert accuracy > 0.9  # a single process scores 0.92 (LightGBM) and 0.94 (XGBoost) on this split
    (run,) = tmp_path.iterdir()
    assert len(list(run.glob("checkpoint_*/.manifest.json"))) == 4  # rounds 10, 20, 30, 40


def test_lightning_example_trains_to_good_accuracy(tmp_path):
    stdout = run_example("lightning_digits", tmp_path)
    accuracy = float(re.search(r"validation accuracy: ([0-9.]+)", stdout).group(1))
    print(f"lightning_digits validation accuracy: {accuracy:.3f}")
    assert accuracy > 0.9 and "restored model with lr=0.01" in stdout
    (run,) = tmp_path.iterdir()
    assert len(list(run.glob("checkpoint_*/checkpoint.ckpt"))) == 2  # CheckpointConfig(num_to_keep=2)


def test_jax_example_trains_across_2_processes(tmp_path):
    stdout = run_example("jax_digits", tmp_path)
    assert "processes: 2, devices: 2" in stdout  # one device mesh over both processes
    accuracy = float(re.search(r"held-out test accuracy: ([0-9.]+)", stdout).group(1))
    print(f"jax_digits held-out accuracy: {accuracy:.3f}")
    assert accuracy > 0.9


@pytest.mark.timeout(900)  # a 4-trial search, 150 s on a busy CI machine: the default 300 s is a hang bound for less
def test_tune_example_searches_with_asha(tmp_path):
    stdout = run_example("tune_digits", tmp_path, timeout_s=800)
    print(stdout)
    trials, errors, stopped = map(int, re.search(r"trials: (\d+), errors: (\d+), stopped early by ASHA: (\d+)",
                                                 stdout).groups())
    assert (trials, errors) == (4, 0) and stopped >= 1
    assert float(re.search(r"held-out test accuracy: ([0-9.]+)", stdout).group(1)) > 0.9
    runs = {p.name for p in tmp_path.iterdir()} - {"tune_digits"}  # one trainkit run per trial
    assert len(runs) == 4
