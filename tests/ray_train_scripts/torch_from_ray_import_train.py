"""Ray Train 2.x's PyTorch quickstart idiom `from ray import train`: prepare_model, prepare_data_loader,
a checkpoint saved by rank 0, the best checkpoint picked by CheckpointConfig."""

import os
import tempfile

import torch
from torch.utils.data import DataLoader, TensorDataset

import ray.train.torch
from ray import train
from ray.train import Checkpoint, CheckpointConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def train_func(config):
    torch.manual_seed(0)
    x = torch.randn(128, 4)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1
    loader = ray.train.torch.prepare_data_loader(DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True))
    model = ray.train.torch.prepare_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(config["epochs"]):
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb).squeeze(1), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if train.get_context().get_world_rank() == 0:
                torch.save(model.module.state_dict(), os.path.join(tmp, "model.pt"))
                checkpoint = Checkpoint.from_directory(tmp)
            train.report({"loss": loss.item(), "epoch": epoch}, checkpoint=checkpoint)


if __name__ == "__main__":
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": 4},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(name="torch_from_ray_import_train", checkpoint_config=CheckpointConfig(
            num_to_keep=2, checkpoint_score_attribute="loss", checkpoint_score_order="min")),
    )
    result = trainer.fit()
    assert result.error is None and result.metrics["epoch"] == 3, result
    assert len(result.best_checkpoints) == 2, result.best_checkpoints
    best_checkpoint, best_metrics = min(result.best_checkpoints, key=lambda pair: pair[1]["loss"])
    with best_checkpoint.as_directory() as path:
        state = torch.load(os.path.join(path, "model.pt"))
    assert set(state) == {"weight", "bias"}
    print("best loss:", best_metrics["loss"])
