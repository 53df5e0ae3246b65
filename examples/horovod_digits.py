"""Horovod (torch) on scikit-learn's bundled digits, 2 CPU workers over Gloo (no MPI, no horovodrun).

Every worker holds half of the training rows. ``hvd.broadcast_parameters`` starts both from rank
0's weights and ``hvd.DistributedOptimizer`` averages the gradients across workers at every step
(a Gloo all-reduce), so both keep identical weights. Every epoch rank 0 commits a checkpoint; a
restarted attempt resumes from it. At the end the model from the last checkpoint is scored on
held-out rows. Needs Horovod: ``python -m trainkit_horovod.build`` once.

    python examples/horovod_digits.py
"""

from __future__ import annotations

import os
import tempfile

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import trainkit
from trainkit_horovod import HorovodTrainer


def digits(part: str) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    x, y = (x_train, y_train) if part == "train" else (x_test, y_test)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def train_fn(config: dict) -> None:
    import horovod.torch as hvd

    hvd.init()  # rank, size and the rendezvous come from trainkit's workers
    torch.set_num_threads(1)
    model, epoch = make_model(), 0
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"] * hvd.size(), momentum=0.9)
    if checkpoint := trainkit.get_checkpoint():  # a restarted attempt continues where it stopped
        with checkpoint.as_directory() as directory:
            state = torch.load(os.path.join(directory, "model.pt"))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        epoch = state["epoch"]
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    x, y = digits("train")
    rows = len(x) // hvd.size()  # the same number of steps on every worker
    x, y = trainkit.shard(x)[:rows], trainkit.shard(y)[:rows]
    generator = torch.Generator().manual_seed(hvd.rank())
    for epoch in range(epoch, config["epochs"]):
        for batch in torch.randperm(rows, generator=generator).split(config["batch_size"]):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
        loss = hvd.allreduce(loss.detach(), name="loss").item()  # the mean over workers
        metrics = {"epoch": epoch + 1, "loss": loss}
        if hvd.rank() == 0:  # identical weights everywhere: rank 0 saves them
            with tempfile.TemporaryDirectory() as directory:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1},
                           os.path.join(directory, "model.pt"))
                trainkit.report(metrics, checkpoint=trainkit.Checkpoint.from_directory(directory))
        else:
            trainkit.report(metrics)


def held_out_accuracy(checkpoint: trainkit.Checkpoint) -> float:
    model = make_model()
    with checkpoint.as_directory() as directory:
        model.load_state_dict(torch.load(os.path.join(directory, "model.pt"))["model"])
    x, y = digits("test")
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def main() -> None:
    trainer = HorovodTrainer(
        train_fn,
        train_loop_config={"lr": 0.02, "epochs": 10, "batch_size": 32},
        scaling_config=trainkit.ScalingConfig(num_workers=2),
        run_config=trainkit.RunConfig(failure_config=trainkit.FailureConfig(max_failures=2)),
    )
    result = trainer.fit()
    print(f"epochs: {result.metrics['epoch']}, loss: {result.metrics['loss']:.4f}")
    print(f"held-out accuracy: {held_out_accuracy(result.checkpoint):.4f}")


if __name__ == "__main__":
    main()
