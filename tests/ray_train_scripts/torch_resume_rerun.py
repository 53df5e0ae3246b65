"""Ray Train V2's resume: fit the same RunConfig(name, storage_path) again and the run continues from
its last checkpoint; ray.train.get_all_reported_checkpoints lists what this attempt reported."""

import os
import sys
import tempfile

import torch

import ray.train
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train_func(config):
    start = 0
    if checkpoint := ray.train.get_checkpoint():
        with checkpoint.as_directory() as path:
            start = torch.load(os.path.join(path, "state.pt"))["epoch"] + 1
    for epoch in range(start, config["stop"]):
        with tempfile.TemporaryDirectory() as tmp:
            torch.save({"epoch": epoch}, os.path.join(tmp, "state.pt"))
            ray.train.report({"epoch": epoch, "start": start}, checkpoint=Checkpoint.from_directory(tmp))
    reported = ray.train.get_all_reported_checkpoints()
    assert len(reported) >= config["stop"] - start, reported


def fit(stop):
    return TorchTrainer(train_func, train_loop_config={"stop": stop}, scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name="torch_resume_rerun", storage_path=sys.argv[1] if len(sys.argv) > 1
                                             else os.path.abspath("ray_results"))).fit()


if __name__ == "__main__":
    first = fit(stop=2)
    assert first.metrics == {"epoch": 1, "start": 0}, first.metrics
    second = fit(stop=4)  # the same name and storage: resumes after epoch 1
    assert second.metrics == {"epoch": 3, "start": 2}, second.metrics
    print("resumed at", second.metrics["start"])
