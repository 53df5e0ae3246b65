"""trainkit-lightgbm: distributed LightGBM on trainkit.

Example::

    import lightgbm, trainkit
    from trainkit_lightgbm import LightGBMTrainer, ReportCallback, get_network_params

    def train_fn(config):
        params = {"objective": "binary", "tree_learner": "data", "pre_partition": True,
                  **get_network_params()}                           # machines, ports, num_machines
        data = lightgbm.Dataset(trainkit.shard(x), label=trainkit.shard(y))   # this rank's rows
        lightgbm.train(params, data, num_boost_round=50, callbacks=[ReportCallback(frequency=10)])

    result = LightGBMTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    booster = ReportCallback.get_model(result.checkpoint)
"""

from trainkit_lightgbm.backend import get_network_params
from trainkit_lightgbm.callback import ReportCallback
from trainkit_lightgbm.checkpoint import LightGBMCheckpointIO
from trainkit_lightgbm.config import LightGBMConfig
from trainkit_lightgbm.data import normalize_pandas_for_lightgbm
from trainkit_lightgbm.trainer import LightGBMTrainer

__all__ = ["LightGBMCheckpointIO", "LightGBMConfig", "LightGBMTrainer", "ReportCallback", "get_network_params",
           "normalize_pandas_for_lightgbm"]
