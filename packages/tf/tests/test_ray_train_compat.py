"""A Ray Train TensorFlow script, changed only by `trainkit migrate`, runs on trainkit
(here, not in tests/test_ray_train_compat.py: TensorFlow stays out of the shared environment)."""

import importlib.util
from pathlib import Path

COMPAT = Path(__file__).parents[3] / "tests" / "test_ray_train_compat.py"
spec = importlib.util.spec_from_file_location("ray_train_compat", COMPAT)
ray_train_compat = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ray_train_compat)


def test_ray_train_tensorflow_script_runs_after_migration(tmp_path):
    stdout = ray_train_compat.run_migrated_script("tensorflow_digits", tmp_path)
    assert "epochs: 3" in stdout and "'accuracy'" in stdout
    run = tmp_path / "results" / "tensorflow_digits"
    assert len(list(run.glob("checkpoint_*/model.keras"))) == 3  # ReportCheckpointCallback: every epoch
