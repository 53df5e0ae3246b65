"""Entry point of trainkit-xgboost: registers the ``xgboost`` backend. Imports no xgboost."""

from __future__ import annotations

from trainkit import hookimpl

from trainkit_xgboost.config import XGBoostConfig

FRAMEWORK = "xgboost"


@hookimpl
def trainkit_register_backends(registry) -> None:
    from trainkit_xgboost.trainer import XGBoostTrainer

    registry.register("xgboost", XGBoostConfig, XGBoostTrainer)
