"""Entry point of trainkit-jax: registers the ``jax`` backend. Imports no JAX."""

from __future__ import annotations

from trainkit import hookimpl

from trainkit_jax.config import JaxConfig

FRAMEWORK = "jax"  # the distribution whose version range (from our metadata) the loader checks


@hookimpl
def trainkit_register_backends(registry) -> None:
    from trainkit_jax.trainer import JaxTrainer

    registry.register("jax", JaxConfig, JaxTrainer)
