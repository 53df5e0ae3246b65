"""Entry point of trainkit-lightgbm: registers the ``lightgbm`` backend. Imports no lightgbm."""

from __future__ import annotations

from trainkit import hookimpl

from trainkit_lightgbm.config import LightGBMConfig

FRAMEWORK = "lightgbm"


@hookimpl
def trainkit_register_backends(registry) -> None:
    from trainkit_lightgbm.trainer import LightGBMTrainer

    registry.register("lightgbm", LightGBMConfig, LightGBMTrainer)
