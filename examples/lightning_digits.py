"""A LightningModule on scikit-learn's bundled digits, trained on 2 CPU workers with DDP.

Lightning's own Trainer runs on every worker; trainkit_lightning's strategy and environment join it
to trainkit's process group, and ReportCallback turns each epoch into a trainkit report with a
checkpoint. A re-run with the same name (or a restart after a failure) resumes from it.

    python examples/lightning_digits.py            # works the same with `import pytorch_lightning as pl`
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainkit
import trainkit_lightning as tkl
from trainkit_torch import TorchTrainer


class DigitsData(pl.LightningDataModule):
    def setup(self, stage: str) -> None:
        x, y = load_digits(return_X_y=True)
        x = torch.tensor(x, dtype=torch.float32) / 16.0
        x_train, x_val, y_train, y_val = train_test_split(x, torch.tensor(y), test_size=0.25, random_state=0, stratify=y)
        self.train, self.val = TensorDataset(x_train, y_train), TensorDataset(x_val, y_val)

    def train_dataloader(self) -> DataLoader:  # Lightning adds a DistributedSampler with trainkit's ranks
        return DataLoader(self.train, batch_size=32, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=128)


class Classifier(pl.LightningModule):
    def __init__(self, lr: float):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        accuracy = (self.net(x).argmax(1) == y).float().mean()
        self.log("val_accuracy", accuracy, sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def train_fn(config: dict) -> None:
    pl.seed_everything(0, verbose=False)
    trainer = pl.Trainer(
        max_epochs=config["epochs"], accelerator="cpu", devices="auto",
        strategy=tkl.DDPStrategy(), plugins=[tkl.LightningEnvironment()], callbacks=[tkl.ReportCallback()],
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, logger=False)
    trainer = tkl.prepare_trainer(trainer)
    with tkl.resume_path() as ckpt_path:  # the last committed checkpoint, or None
        trainer.fit(Classifier(config["lr"]), datamodule=DigitsData(), ckpt_path=ckpt_path)


def main() -> trainkit.Result:
    result = TorchTrainer(
        train_fn, train_loop_config={"lr": 1e-2, "epochs": 6},
        scaling_config=trainkit.ScalingConfig(num_workers=2),
        run_config=trainkit.RunConfig(checkpoint_config=trainkit.CheckpointConfig(
            num_to_keep=2, checkpoint_score_attribute="val_accuracy", checkpoint_score_order="max")),
    ).fit()
    best = result.get_best_checkpoint("val_accuracy", "max")
    with tkl.resume_path(best) as path:
        model = Classifier.load_from_checkpoint(path)
    print(f"best checkpoint: {best.path}")
    print(f"validation accuracy: {max(m['val_accuracy'] for _, m in result.best_checkpoints):.3f}")
    print(f"restored model with lr={model.hparams.lr}")
    return result


if __name__ == "__main__":
    main()
