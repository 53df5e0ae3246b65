"""``XGBoostTrainer``: a ``DataParallelTrainer`` whose workers share XGBoost's collective."""

from __future__ import annotations

from typing import Any, Callable

from trainkit import DataParallelTrainer

from trainkit_xgboost.config import XGBoostConfig


class XGBoostTrainer(DataParallelTrainer):
    """Run an XGBoost training function on every worker; ``xgboost.train`` inside it is distributed.

    Example::

        XGBoostTrainer(train_fn, train_loop_config={"rounds": 50},
                       scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    """

    def __init__(self, train_loop_per_worker: Callable, *, xgboost_config: XGBoostConfig | None = None,
                 **kwargs: Any):
        if xgboost_config is not None and not isinstance(xgboost_config, XGBoostConfig):
            raise TypeError(f"xgboost_config must be an XGBoostConfig, got {type(xgboost_config).__name__}")
        kwargs.setdefault("backend_config", xgboost_config or XGBoostConfig())
        super().__init__(train_loop_per_worker, **kwargs)
