"""``LightGBMTrainer``: a ``DataParallelTrainer`` whose workers know LightGBM's network."""

from __future__ import annotations

from trainkit import DataParallelTrainer

from trainkit_lightgbm.config import LightGBMConfig


class LightGBMTrainer(DataParallelTrainer):
    """Run a LightGBM training function on every worker; with ``get_network_params()`` in its
    params, ``lightgbm.train`` there is distributed.

    Example::

        LightGBMTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    """

    config_cls = LightGBMConfig
    config_arg = "lightgbm_config"
