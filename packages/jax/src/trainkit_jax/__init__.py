"""trainkit-jax: JAX on trainkit.

Example::

    import jax, trainkit
    from trainkit_jax import JaxCheckpointIO, JaxTrainer

    def train_fn(config):
        print(jax.process_index(), jax.device_count())   # every process's devices: 2 on 2 CPU workers
        ...
        JaxCheckpointIO().report({"loss": float(loss)}, {"params": params})

    JaxTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
"""

from trainkit_jax.checkpoint import JaxCheckpointIO, restore
from trainkit_jax.config import JaxConfig
from trainkit_jax.trainer import JaxTrainer

__all__ = ["JaxCheckpointIO", "JaxConfig", "JaxTrainer", "restore"]
