"""Ray Train's PyTorch getting-started, as a Ray user writes it: every rank saves model.pt (with
BatchNorm buffers that differ per rank) and reports it; the run name is a Tune-style
"trial_id=..." one; the error names and get_all_reported_checkpoints are Ray's.
tests/test_ray_train_compat.py migrates it with the rewrite table and runs it on trainkit."""

import os
import tempfile

import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

import ray.train
import ray.train.torch
from ray.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 10))


def train_func(config):
    x, y = load_digits(return_X_y=True)
    dataset = TensorDataset(torch.tensor(x, dtype=torch.float32) / 16, torch.tensor(y))
    loader = ray.train.torch.prepare_data_loader(DataLoader(dataset, batch_size=64, shuffle=True))
    model = ray.train.torch.prepare_model(make_model())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(config["epochs"]):
        if ray.train.get_context().get_world_size() > 1:
            loader.sampler.set_epoch(epoch)
        total, correct = 0, 0
        for images, labels in loader:
            outputs = model(images)
            loss = torch.nn.functional.cross_entropy(outputs, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, correct = total + len(labels), correct + (outputs.argmax(1) == labels).sum().item()
        metrics = {"loss": loss.item(), "accuracy": correct / total, "epoch": epoch}
        with tempfile.TemporaryDirectory() as temp_checkpoint_dir:
            torch.save(model.module.state_dict(), os.path.join(temp_checkpoint_dir, "model.pt"))
            ray.train.report(metrics, checkpoint=Checkpoint.from_directory(temp_checkpoint_dir))
    reported = ray.train.get_all_reported_checkpoints()
    assert [r.metrics["epoch"] for r in reported] == list(range(config["epochs"]))[-2:], reported  # num_to_keep


if __name__ == "__main__":
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="torch_batchnorm-trial_id=abc", checkpoint_config=CheckpointConfig(num_to_keep=2)),
    )
    try:
        result = trainer.fit()
    except ray.train.WorkerGroupError as error:
        raise SystemExit(f"a worker failed: {error.worker_failures}")
    with result.checkpoint.as_directory() as checkpoint_dir:
        model = make_model()
        model.load_state_dict(torch.load(os.path.join(checkpoint_dir, "model.pt")))
    model.eval()
    x, y = load_digits(return_X_y=True)
    accuracy = (model(torch.tensor(x, dtype=torch.float32) / 16).argmax(1) == torch.tensor(y)).float().mean().item()
    print("metrics:", result.metrics, "reloaded accuracy:", accuracy)
    assert result.metrics["epoch"] == 2 and accuracy > 0.8, accuracy
    assert os.path.basename(result.path) == "torch_batchnorm-trial_id=abc"
