"""Quickstart: a small CNN on scikit-learn's bundled digits, trained on 2 CPU workers with DDP.

Each epoch reports metrics and a checkpoint; at the end the best checkpoint is loaded in this
process and scored on held-out digits.

    python examples/torch_quickstart.py [--name RUN]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainkit
from trainkit_torch import TorchTrainer, load_checkpoint, prepare_data_loader, prepare_model


def digits_split(part: str) -> TensorDataset:
    """'train', 'val' or 'test' part of digits (60/20/20, fixed seed), as 1x8x8 images."""
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    y = torch.tensor(y)
    x_rest, x_test, y_rest, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    x_train, x_val, y_train, y_val = train_test_split(x_rest, y_rest, test_size=0.25, random_state=0, stratify=y_rest)
    return {"train": TensorDataset(x_train, y_train), "val": TensorDataset(x_val, y_val),
            "test": TensorDataset(x_test, y_test)}[part]


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10),
    )


def accuracy(model: nn.Module, dataset: TensorDataset) -> float:
    model.eval()
    with torch.no_grad():
        x, y = dataset.tensors
        return (model(x).argmax(1) == y).float().mean().item()


def train_fn(config: dict) -> None:
    torch.manual_seed(0)
    loader = prepare_data_loader(DataLoader(digits_split("train"), batch_size=config["batch_size"], shuffle=True))
    model = prepare_model(make_model())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    start_epoch = 0
    checkpoint = trainkit.get_checkpoint()
    if checkpoint:  # resuming after a failure or a re-run of the same run name
        state = load_checkpoint(checkpoint, "model.pt")
        (model.module if hasattr(model, "module") else model).load_state_dict(state["model"])
        start_epoch = state["epoch"] + 1

    val = digits_split("val")
    for epoch in range(start_epoch, config["epochs"]):
        model.train()
        total, batches = 0.0, 0
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
        metrics = {"epoch": epoch, "loss": total / batches, "val_accuracy": accuracy(model, val)}
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if trainkit.get_context().get_world_rank() == 0:  # DDP replicas are identical: rank 0 saves
                inner = model.module if hasattr(model, "module") else model
                torch.save({"model": inner.state_dict(), "epoch": epoch}, os.path.join(tmp, "model.pt"))
                checkpoint = trainkit.Checkpoint.from_directory(tmp)
            trainkit.report(metrics, checkpoint=checkpoint)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", help="the run's name (default: TorchTrainer_<date>_<time>)")
    args = parser.parse_args()
    trainer = TorchTrainer(
        train_fn,
        train_loop_config={"lr": 2e-3, "batch_size": 32, "epochs": 8},
        scaling_config=trainkit.ScalingConfig(num_workers=2),
        run_config=trainkit.RunConfig(
            name=args.name,
            checkpoint_config=trainkit.CheckpointConfig(
                num_to_keep=2, checkpoint_score_attribute="val_accuracy", checkpoint_score_order="max")),
    )
    result = trainer.fit()
    best = result.get_best_checkpoint()  # by the CheckpointConfig's val_accuracy, max
    model = make_model()
    model.load_state_dict(load_checkpoint(best, "model.pt")["model"])
    print(f"best checkpoint: {best.path}")
    print(f"held-out test accuracy: {accuracy(model, digits_split('test')):.3f}")


if __name__ == "__main__":
    main()
