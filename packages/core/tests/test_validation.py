"""Asynchronous validation of committed checkpoints, in Ray tasks, while training goes on."""

import json
import os
import tempfile
import time

import pytest

import trainkit
from trainkit import (Checkpoint, CheckpointConfig, DataParallelTrainer, ScalingConfig, ValidationConfig,
                      ValidationTaskConfig)

SCORES = [3, 9, 1, 5]  # what validating each epoch's checkpoint finds


def train_fn(config):
    for epoch, score in enumerate(SCORES):
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, "model.json"), "w") as f:
                json.dump({"score": score}, f)
            trainkit.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(directory),
                            validation=config.get("validation", True))
    if config.get("trained") and trainkit.get_context().get_world_rank() == 0:
        open(config["trained"], "w").close()


def score_checkpoint(checkpoint, delay_s=0.5, trained=None):
    time.sleep(delay_s)  # validation is slow; training must not wait for it
    if trained:  # a validation that ends only once training has: a report() waiting for it would wait 60 s
        deadline = time.monotonic() + 60
        while not os.path.exists(trained) and time.monotonic() < deadline:
            time.sleep(0.05)
    with checkpoint.as_directory() as directory, open(os.path.join(directory, "model.json")) as f:
        return {"val_score": json.load(f)["score"], "after_training": bool(trained) and os.path.exists(trained)}


def fit(run_config, validation_config, num_workers=2, **config):
    return DataParallelTrainer(train_fn, train_loop_config=config, validation_config=validation_config,
                               scaling_config=ScalingConfig(num_workers=num_workers),
                               run_config=run_config(checkpoint_config=CheckpointConfig(
                                   num_to_keep=2, checkpoint_score_attribute="val_score"))).fit()


def test_validation_scores_checkpoints_without_blocking_training(ray_cluster, run_config, tmp_path):
    trained = str(tmp_path / "trained")
    result = fit(run_config, ValidationConfig(score_checkpoint, task_config=ValidationTaskConfig({"trained": trained})),
                 trained=trained)
    # every validation ended after the training function did: they ran beside training, not in it
    assert [metrics["after_training"] for _, metrics in result.best_checkpoints] == [True, True]
    kept = [metrics["val_score"] for _, metrics in result.best_checkpoints]
    print("ranked by val_score:", kept)
    assert kept == [9, 5]  # merged into the records and ranked; the rest deleted only once validated
    assert sorted(p for p in os.listdir(result.path) if p.startswith("checkpoint_")) == \
        ["checkpoint_000001", "checkpoint_000003"]


def test_a_timeout_or_an_error_is_recorded_and_training_goes_on(ray_cluster, run_config):
    def failing(checkpoint):
        raise ValueError("bad checkpoint")

    slow = ValidationConfig(score_checkpoint, task_config=ValidationTaskConfig({"delay_s": 30}, timeout_s=1))
    for config, expected in ((slow, "TimeoutError: validation did not finish within 1 s (timeout_s)"),
                             (ValidationConfig(failing), "ValueError: bad checkpoint")):
        result = fit(run_config, config)
        assert result.error is None and result.metrics["epoch"] == 3
        assert {m["validation_error"] for _, m in result.best_checkpoints} == {expected}


def test_local_mode_validates_too(run_config):
    result = fit(run_config, ValidationConfig(score_checkpoint, task_config=ValidationTaskConfig({"delay_s": 0})),
                 num_workers=0)
    assert [m["val_score"] for _, m in result.best_checkpoints] == [9, 5]


def test_validation_needs_a_validation_config(ray_cluster, run_config):
    with pytest.raises(trainkit.TrainingFailedError, match=r"needs the trainer's validation_config"):
        fit(run_config, None)


@pytest.mark.parametrize("make, message", [
    (lambda: ValidationConfig(3), "fn=3 is invalid"),
    (lambda: ValidationConfig(print, task_config={"timeout_s": 1}), "task_config=.* is invalid"),
    (lambda: ValidationTaskConfig(timeout_s=0), "timeout_s=0 is invalid"),
    (lambda: ValidationTaskConfig(fn_kwargs=[1]), r"fn_kwargs=\[1\] is invalid"),
])
def test_bad_validation_config_is_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()
