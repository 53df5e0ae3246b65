"""Entry point of trainkit-tf: registers the ``tf`` backend. Imports no TensorFlow."""

from __future__ import annotations

from trainkit import hookimpl

from trainkit_tf.config import TensorflowConfig

FRAMEWORK = "tensorflow"  # the distribution whose version range (from our metadata) the loader checks


@hookimpl
def trainkit_register_backends(registry) -> None:
    from trainkit_tf.trainer import TensorflowTrainer

    registry.register("tf", TensorflowConfig, TensorflowTrainer)
