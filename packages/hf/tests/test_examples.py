"""examples/hf_text_classification.py, accelerate_digits.py and deepspeed_digits.py end to end on 2
CPU workers, and Ray Train's Transformers and Accelerate scripts after `trainkit migrate` (here, not in
tests/: trainkit-hf stays out of the shared integration environment, see its pyproject)."""

import re

import pytest

from repo_scripts import run_example, run_migrated_script


@pytest.mark.parametrize("name, epochs, min_accuracy, checkpoints", [
    ("hf_text_classification", 4, 0.85, 1),  # CheckpointConfig(num_to_keep=1)
    ("accelerate_digits", 5, 0.9, 5),
    ("deepspeed_digits", 6, 0.9, 2),  # CheckpointConfig(num_to_keep=2)
])
def test_example_trains_on_2_workers(tmp_path, name, epochs, min_accuracy, checkpoints):
    stdout = run_example(name, tmp_path)
    assert f"epochs: {epochs}" in stdout
    accuracy = float(re.search(r"held-out accuracy: ([0-9.]+)", stdout).group(1))
    print(f"{name} held-out accuracy: {accuracy:.3f}")
    assert accuracy > min_accuracy
    (run,) = tmp_path.iterdir()
    assert len(list(run.glob("checkpoint_*/.manifest.json"))) == checkpoints


@pytest.mark.parametrize("name", ["transformers_text", "accelerate_torch"])
def test_ray_train_script_runs_after_migration(tmp_path, name):
    run_migrated_script(name, tmp_path)  # each script asserts its own success
