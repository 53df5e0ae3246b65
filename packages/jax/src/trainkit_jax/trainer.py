"""``JaxTrainer``: a ``DataParallelTrainer`` that only picks the default config."""

from __future__ import annotations

from trainkit import DataParallelTrainer

from trainkit_jax.config import JaxConfig


class JaxTrainer(DataParallelTrainer):
    """Run a JAX function on every worker with ``jax.distributed`` initialized: ``jax.devices()``
    lists every process's devices and collectives cross processes.

    Example::

        JaxTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    """

    config_cls = JaxConfig
    config_arg = "jax_config"
