"""``XGBoostTrainer``: a ``DataParallelTrainer`` whose workers share XGBoost's collective."""

from __future__ import annotations

from trainkit import DataParallelTrainer

from trainkit_xgboost.config import XGBoostConfig


class XGBoostTrainer(DataParallelTrainer):
    """Run an XGBoost training function on every worker; ``xgboost.train`` inside it is distributed.

    Example::

        XGBoostTrainer(train_fn, train_loop_config={"rounds": 50},
                       scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    """

    config_cls = XGBoostConfig
    config_arg = "xgboost_config"
