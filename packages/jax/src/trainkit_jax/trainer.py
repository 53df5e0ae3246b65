"""``JaxTrainer``: a ``DataParallelTrainer`` that only picks the default config."""

from __future__ import annotations

from typing import Any, Callable

from trainkit import DataParallelTrainer

from trainkit_jax.config import JaxConfig


class JaxTrainer(DataParallelTrainer):
    """Run a JAX function on every worker with ``jax.distributed`` initialized: ``jax.devices()``
    lists every process's devices and collectives cross processes.

    Example::

        JaxTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    """

    def __init__(self, train_loop_per_worker: Callable, *, jax_config: JaxConfig | None = None, **kwargs: Any):
        if jax_config is not None and not isinstance(jax_config, JaxConfig):
            raise TypeError(f"jax_config must be a JaxConfig, got {type(jax_config).__name__}")
        kwargs.setdefault("backend_config", jax_config or JaxConfig())
        super().__init__(train_loop_per_worker, **kwargs)
