"""Entry point of trainkit-lightning: registers the ``lightning`` backend. Imports no Lightning."""

from __future__ import annotations

from trainkit import hookimpl

from trainkit_lightning.config import LightningConfig

# The distribution whose version range the loader checks: `lightning` depends on it, so it is there
# whichever import name the user's code takes.
FRAMEWORK = "pytorch-lightning"


@hookimpl
def trainkit_register_backends(registry) -> None:
    from trainkit_torch import TorchTrainer

    registry.register("lightning", LightningConfig, TorchTrainer)
