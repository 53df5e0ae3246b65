"""trainkit-xgboost: distributed XGBoost on trainkit.

Example::

    import trainkit, xgboost
    from trainkit_xgboost import ReportCallback, XGBoostTrainer

    def train_fn(config):
        x, y = trainkit.shard(features), trainkit.shard(labels)   # this rank's rows
        xgboost.train(config["params"], xgboost.DMatrix(x, label=y), num_boost_round=50,
                      callbacks=[ReportCallback(frequency=10)])    # trees built from every rank's rows

    result = XGBoostTrainer(train_fn, train_loop_config={"params": {"objective": "binary:logistic"}},
                            scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    booster = ReportCallback.get_model(result.checkpoint)
"""

from trainkit.lazy import lazy_exports

from trainkit_xgboost.checkpoint import XGBoostCheckpointIO
from trainkit_xgboost.config import XGBoostConfig
from trainkit_xgboost.trainer import XGBoostTrainer

__all__ = ["ReportCallback", "XGBoostCheckpointIO", "XGBoostConfig", "XGBoostTrainer"]


# ReportCallback subclasses xgboost's TrainingCallback: importing it imports xgboost, which the
# driver (and the plugin loader) should not pay for until a callback is made.
__getattr__ = lazy_exports(__name__, {"ReportCallback": "trainkit_xgboost.callback"})
