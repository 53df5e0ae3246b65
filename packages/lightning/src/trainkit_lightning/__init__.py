"""trainkit-lightning: PyTorch Lightning on trainkit.

Example::

    import lightning.pytorch as pl            # or: import pytorch_lightning as pl
    import trainkit_lightning as tkl

    def train_fn(config):
        trainer = pl.Trainer(max_epochs=config["epochs"], devices="auto", accelerator="auto",
                             strategy=tkl.DDPStrategy(), plugins=[tkl.LightningEnvironment()],
                             callbacks=[tkl.ReportCallback()])
        trainer = tkl.prepare_trainer(trainer)
        with tkl.resume_path() as ckpt_path:   # the last committed checkpoint, or None
            trainer.fit(MyModule(), datamodule=MyData(), ckpt_path=ckpt_path)

    trainkit_torch.TorchTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()

Importing this package imports no Lightning: each class is built on first use for the import name your
code uses (``classes_for(namespace)`` picks one explicitly when a process imports both).
"""

from trainkit_lightning._build import classes_for, resume_path
from trainkit_lightning._prepare import prepare_trainer
from trainkit_lightning._public import (
    DDPStrategy,
    DeepSpeedStrategy,
    FSDPStrategy,
    LightningEnvironment,
    ReportCallback,
)
from trainkit_lightning.config import LightningConfig

__all__ = [
    "DDPStrategy",
    "DeepSpeedStrategy",
    "FSDPStrategy",
    "LightningConfig",
    "LightningEnvironment",
    "ReportCallback",
    "classes_for",
    "prepare_trainer",
    "resume_path",
]
