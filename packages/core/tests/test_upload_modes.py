"""Checkpoint upload modes of report(): SYNC, ASYNC, NO_UPLOAD, custom upload, local deletion."""

import os
import tempfile

import pytest

import trainkit
from trainkit import Checkpoint, CheckpointUploadMode, DataParallelTrainer, ScalingConfig, TrainingFailedError

LOCAL = ScalingConfig(num_workers=0)


def make_checkpoint(step: int) -> str:
    path = tempfile.mkdtemp()
    open(os.path.join(path, "step"), "w").write(str(step))
    return path


def modes_fn():
    sync_dir, async_dir = make_checkpoint(0), make_checkpoint(1)
    trainkit.report({"i": 0}, checkpoint=Checkpoint.from_directory(sync_dir))
    trainkit.report({"i": 1}, checkpoint=Checkpoint.from_directory(async_dir),
                    checkpoint_upload_mode=CheckpointUploadMode.ASYNC)
    run_path = trainkit.get_context().get_storage().run_path
    in_place = os.path.join(run_path, "written-by-me")
    os.makedirs(in_place)
    open(os.path.join(in_place, "step"), "w").write("2")
    trainkit.report({"i": 2}, checkpoint=Checkpoint.from_directory(in_place),
                    checkpoint_upload_mode=CheckpointUploadMode.NO_UPLOAD)

    def my_upload(checkpoint, destination):
        os.makedirs(destination)
        open(os.path.join(destination, "step"), "w").write("3")
        return Checkpoint(destination)

    trainkit.report({"i": 3}, checkpoint=Checkpoint.from_directory(make_checkpoint(9)), checkpoint_upload_fn=my_upload)
    committed = trainkit.get_all_reported_checkpoints(timeout_s=10)
    return {"sync_kept": os.path.exists(sync_dir), "async_deleted": not os.path.exists(async_dir),
            "committed": [(os.path.basename(r.checkpoint.path), r.metrics["i"], r.status.value) for r in committed]}


def test_upload_modes(run_config):
    result = DataParallelTrainer(modes_fn, scaling_config=LOCAL, run_config=run_config()).fit()
    value = result.return_value
    assert value["sync_kept"] and value["async_deleted"]  # ASYNC deletes the local copy by default
    assert value["committed"] == [(f"checkpoint_00000{i}", i, "COMMITTED") for i in range(4)]
    for checkpoint, metrics in result.best_checkpoints:
        checkpoint.verify()
        assert open(os.path.join(checkpoint.path, "step")).read() == str(metrics["i"])
    assert not os.path.exists(os.path.join(result.path, "written-by-me"))  # moved into the checkpoint


def async_failure_fn():
    trainkit.report({"i": 0}, checkpoint=Checkpoint.from_directory("/nonexistent/dir"),
                    checkpoint_upload_mode=CheckpointUploadMode.ASYNC)
    trainkit.get_all_reported_checkpoints(timeout_s=1)
    trainkit.report({"i": 1})  # the failed background upload surfaces here, in the training thread


def test_async_upload_failure_surfaces_in_training_thread(run_config):
    with pytest.raises(TrainingFailedError, match="does not exist") as info:
        DataParallelTrainer(async_failure_fn, scaling_config=LOCAL, run_config=run_config()).fit()
    assert "async_failure_fn" in info.value.worker_traceback


def same_name_each_step():
    for step in range(3):
        trainkit.report({"step": step}, checkpoint=Checkpoint.from_directory(make_checkpoint(step)),
                        checkpoint_dir_name="latest")


def test_a_name_reported_again_replaces_the_checkpoint(run_config):
    result = DataParallelTrainer(same_name_each_step, scaling_config=LOCAL, run_config=run_config()).fit()
    assert result.checkpoint.path.endswith("/latest") and result.checkpoint.verify()["index"] == 2
    assert open(os.path.join(result.checkpoint.path, "step")).read() == "2"
    assert sorted(p for p in os.listdir(result.path) if not p.startswith("run_state")) == ["latest", "metrics.jsonl"]
