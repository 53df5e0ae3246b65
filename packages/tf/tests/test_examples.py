"""examples/tf_keras_digits.py and examples/keras3_digits.py, end to end on 2 CPU workers (here, not
in tests/test_examples.py: TensorFlow stays out of the shared integration environment)."""

import re

import pytest

from repo_scripts import run_example


@pytest.mark.parametrize("name", ["tf_keras_digits", "keras3_digits"])
def test_example_trains_on_2_workers(tmp_path, name):
    stdout = run_example(name, tmp_path)
    assert "epochs: 5" in stdout
    accuracy = float(re.search(r"held-out test accuracy: ([0-9.]+)", stdout).group(1))
    print(f"{name} held-out accuracy: {accuracy:.3f}")
    assert accuracy > 0.9
    (run,) = tmp_path.iterdir()
    assert len(list(run.glob("checkpoint_*/model.keras"))) == 5  # one per epoch
