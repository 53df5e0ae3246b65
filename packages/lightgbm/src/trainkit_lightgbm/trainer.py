"""``LightGBMTrainer``: a ``DataParallelTrainer`` whose workers know LightGBM's network."""

from __future__ import annotations

from typing import Any, Callable

from trainkit import DataParallelTrainer

from trainkit_lightgbm.config import LightGBMConfig


class LightGBMTrainer(DataParallelTrainer):
    """Run a LightGBM training function on every worker; with ``get_network_params()`` in its
    params, ``lightgbm.train`` there is distributed.

    Example::

        LightGBMTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    """

    def __init__(self, train_loop_per_worker: Callable, *, lightgbm_config: LightGBMConfig | None = None,
                 **kwargs: Any):
        if lightgbm_config is not None and not isinstance(lightgbm_config, LightGBMConfig):
            raise TypeError(f"lightgbm_config must be a LightGBMConfig, got {type(lightgbm_config).__name__}")
        kwargs.setdefault("backend_config", lightgbm_config or LightGBMConfig())
        super().__init__(train_loop_per_worker, **kwargs)
