"""Ray Train's Result as its docs use it: metrics, checkpoint, best_checkpoints kept by a scored
CheckpointConfig, get_best_checkpoint, metrics_dataframe, path, error, and Checkpoint.to_directory."""

import os
import tempfile

from ray.train import Checkpoint, CheckpointConfig, Result, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

import ray.train


def train_fn(config):
    for step, accuracy in enumerate(config["accuracies"]):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "accuracy"), "w") as f:
                f.write(str(accuracy))
            ray.train.report({"step": step, "accuracy": accuracy}, checkpoint=Checkpoint.from_directory(tmp))


if __name__ == "__main__":
    result: Result = TorchTrainer(
        train_fn,
        train_loop_config={"accuracies": [0.5, 0.9, 0.7, 0.8]},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="result_checkpoints", checkpoint_config=CheckpointConfig(
            num_to_keep=2, checkpoint_score_attribute="accuracy", checkpoint_score_order="max")),
    ).fit()
    assert result.error is None and result.metrics["step"] == 3, result
    assert sorted(metrics["accuracy"] for _, metrics in result.best_checkpoints) == [0.8, 0.9]
    best = result.get_best_checkpoint(metric="accuracy", mode="max")
    path = best.to_directory(os.path.abspath("best"))
    assert open(os.path.join(path, "accuracy")).read() == "0.9"
    assert {0.8, 0.9} <= set(result.metrics_dataframe["accuracy"])  # Ray Train: the kept checkpoints' rows
    assert os.path.isdir(result.path), result.path
    print("best accuracy:", open(os.path.join(path, "accuracy")).read())
