"""A Ray Train TensorFlow script, changed only by `trainkit migrate`, runs on trainkit
(here, not in tests/test_ray_train_compat.py: TensorFlow stays out of the shared environment)."""

from repo_scripts import run_migrated_script


def test_ray_train_tensorflow_script_runs_after_migration(tmp_path):
    stdout = run_migrated_script("tensorflow_digits", tmp_path)
    assert "epochs: 3" in stdout and "'accuracy'" in stdout
    run = tmp_path / "results" / "tensorflow_digits"
    assert len(list(run.glob("checkpoint_*/model.keras"))) == 3  # ReportCheckpointCallback: every epoch
