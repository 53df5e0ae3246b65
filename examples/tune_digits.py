"""Learning-rate search with Ray Tune: every trial is a 2-worker trainkit TorchTrainer training a
small MLP on scikit-learn's bundled digits; ASHA stops the trials that fall behind.

Each trial reserves its own workers (``trial_resources``), so Tune starts a trial only when all of
its workers fit. ``TuneReportCallback`` hands every report and checkpoint to Tune. At the end the
best trial's checkpoint is loaded here and scored on held-out digits.

    python examples/tune_digits.py
"""

from __future__ import annotations

import os
import tempfile
import time

import torch
from ray import tune
from ray.tune.schedulers import ASHAScheduler
from torch import nn
from torch.utils.data import DataLoader

import trainkit
from torch_quickstart import accuracy, digits_split  # the quickstart's data split and scoring
from trainkit.tune import TuneReportCallback, trial_resources
from trainkit_torch import TorchTrainer, load_checkpoint, prepare_data_loader, prepare_model

EPOCHS = 6
LEARNING_RATES = [1e-2, 3e-3, 3e-4, 1e-4]  # trials start in this order; ASHA stops the ones behind
SCALING = trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})


def make_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def train_fn(config: dict) -> None:
    torch.manual_seed(0)
    loader = prepare_data_loader(DataLoader(digits_split("train"), batch_size=32, shuffle=True))
    model = prepare_model(make_model())
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    val = digits_split("val")
    for epoch in range(EPOCHS):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        inner = model.module if hasattr(model, "module") else model
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if trainkit.get_context().get_world_rank() == 0:
                torch.save({"model": inner.state_dict()}, os.path.join(tmp, "model.pt"))
                checkpoint = trainkit.Checkpoint.from_directory(tmp)
            trainkit.report({"epoch": epoch, "val_accuracy": accuracy(inner, val)}, checkpoint=checkpoint)


def trial(config: dict) -> None:
    """One Tune trial: a whole trainkit run, named after the trial."""
    TorchTrainer(train_fn, train_loop_config=config, scaling_config=SCALING,
                 run_config=trainkit.RunConfig(name=tune.get_context().get_trial_name(), verbose=0,
                                               callbacks=[TuneReportCallback()])).fit()


def main() -> None:
    storage = os.environ.get("TRAINKIT_STORAGE_PATH", os.path.expanduser("~/trainkit_results"))
    start = time.monotonic()
    tuner = tune.Tuner(
        tune.with_resources(trial, trial_resources(SCALING)),
        param_space={"lr": tune.grid_search(LEARNING_RATES)},
        tune_config=tune.TuneConfig(metric="val_accuracy", mode="max", scheduler=ASHAScheduler(
            time_attr="training_iteration", max_t=EPOCHS, grace_period=1, reduction_factor=2)),
        run_config=tune.RunConfig(name="tune_digits", storage_path=storage, verbose=0),
    )
    results = tuner.fit()
    stopped = sum(r.metrics["training_iteration"] < EPOCHS for r in results)
    best = results.get_best_result(scope="last")
    model = make_model()
    checkpoint = trainkit.Checkpoint(best.checkpoint.path, best.checkpoint.filesystem)  # Tune's copy of it
    model.load_state_dict(load_checkpoint(checkpoint, "model.pt")["model"])
    print(f"trials: {len(results)}, errors: {results.num_errors}, stopped early by ASHA: {stopped}")
    print(f"best lr: {best.config['lr']:g}, val accuracy: {best.metrics['val_accuracy']:.3f}")
    print(f"held-out test accuracy: {accuracy(model, digits_split('test')):.3f}")
    print(f"search time: {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
