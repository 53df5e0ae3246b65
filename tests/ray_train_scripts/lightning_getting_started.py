"""Ray Train's Lightning getting-started, as a Ray user writes it: Lightning's own checkpointing off
(enable_checkpointing=False), Lightning's default progress bar on, RayTrainReportCallback every epoch.
tests/test_ray_train_compat.py migrates it with the rewrite table and runs it on trainkit."""

import os

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

from ray.train import RunConfig, ScalingConfig
from ray.train.lightning import RayDDPStrategy, RayLightningEnvironment, RayTrainReportCallback, prepare_trainer
from ray.train.torch import TorchTrainer


class DigitsClassifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def forward(self, x):
        return self.model(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("loss", loss, on_step=True, prog_bar=True)
        self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.model.parameters(), lr=1e-2)


def train_func():
    x, y = load_digits(return_X_y=True)
    train_dataloader = DataLoader(TensorDataset(torch.tensor(x, dtype=torch.float32) / 16, torch.tensor(y)),
                                  batch_size=128, shuffle=True)
    model = DigitsClassifier()
    trainer = pl.Trainer(
        max_epochs=2,
        devices="auto",
        accelerator="auto",
        strategy=RayDDPStrategy(),
        plugins=[RayLightningEnvironment()],
        callbacks=[RayTrainReportCallback()],
        # [1a] Optionally, disable the default checkpointing behavior
        # in favor of the `RayTrainReportCallback` above.
        enable_checkpointing=False,
    )
    trainer = prepare_trainer(trainer)
    trainer.fit(model, train_dataloaders=train_dataloader)


if __name__ == "__main__":
    trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(name="lightning_getting_started"))
    result = trainer.fit()
    with result.checkpoint.as_directory() as checkpoint_dir:
        model = DigitsClassifier.load_from_checkpoint(
            os.path.join(checkpoint_dir, RayTrainReportCallback.CHECKPOINT_NAME))
    print("metrics:", result.metrics)
    assert result.metrics["epoch"] == 1 and result.metrics["train_loss"] < 2.0, result.metrics
    assert isinstance(model, DigitsClassifier)
