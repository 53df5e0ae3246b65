"""PyTorch Lightning written for Ray Train 2.x (its documented ray.train.lightning API), reached by
`import ray.train.lightning` and attribute access. tests/test_ray_train_compat.py migrates it with
`trainkit migrate` and runs it on trainkit."""

import os

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

import ray.train
import ray.train.lightning
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


class Classifier(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def train_func(config):
    x, y = load_digits(return_X_y=True)
    data = DataLoader(TensorDataset(torch.tensor(x, dtype=torch.float32) / 16, torch.tensor(y)),
                      batch_size=64, shuffle=True)
    trainer = pl.Trainer(max_epochs=config["epochs"], devices="auto", accelerator="auto",
                         strategy=ray.train.lightning.RayDDPStrategy(),
                         plugins=[ray.train.lightning.RayLightningEnvironment()],
                         callbacks=[ray.train.lightning.RayTrainReportCallback()],
                         enable_progress_bar=False, logger=False)
    trainer = ray.train.lightning.prepare_trainer(trainer)
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as ckpt_dir:
            trainer.fit(Classifier(), train_dataloaders=data,
                        ckpt_path=os.path.join(ckpt_dir, ray.train.lightning.RayTrainReportCallback.CHECKPOINT_NAME))
    else:
        trainer.fit(Classifier(), train_dataloaders=data)


if __name__ == "__main__":
    result = TorchTrainer(
        train_func,
        train_loop_config={"epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="lightning_digits"),
    ).fit()
    print("epochs:", result.metrics["epoch"] + 1)
    print(result.metrics)
    assert result.metrics["epoch"] == 2 and "loss" in result.metrics, result.metrics
    assert len(result.best_checkpoints) == 3  # one a epoch
    with result.checkpoint.as_directory() as path:
        assert os.path.exists(os.path.join(path, ray.train.lightning.RayTrainReportCallback.CHECKPOINT_NAME))
