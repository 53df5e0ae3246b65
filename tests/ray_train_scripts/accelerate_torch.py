"""Hugging Face Accelerate inside a Ray Train TorchTrainer, as Ray Train's Accelerate guide writes it:
Accelerator() joins the process group the trainer set up."""

import os
import tempfile

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

import ray.train
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer


def train_func(config):
    accelerator = Accelerator(cpu=True)
    assert accelerator.num_processes == ray.train.get_context().get_world_size()
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(config["epochs"]):
        for xb, yb in loader:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
        with tempfile.TemporaryDirectory() as tmp:  # Ray Train's result.metrics are its last checkpoint's
            accelerator.save(accelerator.unwrap_model(model).state_dict(), os.path.join(tmp, "model.pt"))
            ray.train.report({"loss": loss.item(), "epoch": epoch, "processes": accelerator.num_processes},
                             checkpoint=ray.train.Checkpoint.from_directory(tmp))


if __name__ == "__main__":
    result = TorchTrainer(train_func, train_loop_config={"epochs": 2}, scaling_config=ScalingConfig(num_workers=2),
                          run_config=ray.train.RunConfig(name="accelerate_torch")).fit()
    assert result.metrics["epoch"] == 1 and result.metrics["processes"] == 2, result.metrics
    print(result.metrics)
