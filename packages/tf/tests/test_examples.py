"""examples/tf_keras_digits.py and examples/keras3_digits.py, end to end on 2 CPU workers (here, not
in tests/test_examples.py: TensorFlow stays out of the shared integration environment)."""

import os
import re
import sys
from pathlib import Path

import pytest

from trainkit.testing import subprocesses

EXAMPLES = Path(__file__).parents[3] / "examples"


@pytest.mark.parametrize("name", ["tf_keras_digits", "keras3_digits"])
def test_example_trains_on_2_workers(tmp_path, name):
    out = subprocesses.run([sys.executable, str(EXAMPLES / f"{name}.py")], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "TRAINKIT_STORAGE_PATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "epochs: 5" in out.stdout
    accuracy = float(re.search(r"held-out test accuracy: ([0-9.]+)", out.stdout).group(1))
    print(f"{name} held-out accuracy: {accuracy:.3f}")
    assert accuracy > 0.9
    (run,) = tmp_path.iterdir()
    assert len(list(run.glob("checkpoint_*/model.keras"))) == 5  # one per epoch
