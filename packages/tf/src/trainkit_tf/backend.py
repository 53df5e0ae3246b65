"""``TensorflowBackend``: gives every worker a port and sets ``TF_CONFIG`` (all workers' addresses,
this worker's rank as task index), so ``tf.distribute.MultiWorkerMirroredStrategy()`` spans the
workers; picks the workers' Keras and makes Keras 3's multi-worker ``fit`` fail clearly.

TensorFlow's collective server cannot be stopped inside a process; a restarted attempt starts
fresh worker processes, which join anew.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os

import trainkit
from trainkit import Backend

from trainkit_tf.config import TensorflowConfig

KERAS3_FIT_ERROR = (
    "Keras 3's Model.fit cannot train across workers under MultiWorkerMirroredStrategy (an open upstream "
    "limitation: keras-team/keras#20585). Use one of the two supported ways: (1) tf-keras: pip install "
    "'trainkit-tf[tf-keras]' (tf-keras of TensorFlow's minor version), build the model with tf.keras "
    "(TensorflowConfig(legacy_keras=True) or None makes tf.keras tf-keras) and keep model.fit; or (2) keep "
    "Keras 3 and train with trainkit_tf.fit_loop(model, dataset, epochs=..., steps_per_epoch=...)."
)


def _setup(addresses: list[str], legacy_keras: bool | None) -> None:
    # Waits for the prewarm import: TensorFlow and Keras import each other, so a first `import keras`
    # racing the prewarm thread's `import tensorflow` would see half-initialized modules.
    import tensorflow as tf

    index = trainkit.get_context().get_world_rank()
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})
    has_tf_keras = importlib.util.find_spec("tf_keras") is not None
    if legacy_keras and not has_tf_keras:
        minor = ".".join(tf.__version__.split(".")[:2])
        raise ImportError(f"TensorflowConfig(legacy_keras=True) needs tf-keras of TensorFlow's minor version: "
                          f"pip install 'trainkit-tf[tf-keras]' 'tf-keras=={minor}.*'")
    if legacy_keras is not None:
        os.environ["TF_USE_LEGACY_KERAS"] = "1" if legacy_keras else "0"
    elif has_tf_keras:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    if len(addresses) > 1:
        _guard_keras3_fit()


def _guard_keras3_fit() -> None:
    """Keras 3's ``Model.fit`` raises ``KERAS3_FIT_ERROR`` under a multi-worker strategy, up front,
    instead of failing deep inside TensorFlow."""
    import keras
    import tensorflow as tf

    fit = keras.Model.fit
    if getattr(fit, "trainkit_guard", False):
        return

    @functools.wraps(fit)
    def guarded_fit(self, *args, **kwargs):
        if isinstance(self.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
            raise RuntimeError(KERAS3_FIT_ERROR)
        return fit(self, *args, **kwargs)

    guarded_fit.trainkit_guard = True
    keras.Model.fit = guarded_fit


def _teardown() -> None:
    os.environ.pop("TF_CONFIG", None)


class TensorflowBackend(Backend):
    def on_start(self, worker_group, backend_config: TensorflowConfig) -> None:
        # each worker holds its port until its gRPC server binds it (beside the hold)
        addresses = [f"{host}:{ports[0]}" for host, ports in worker_group.free_ports(1, hold=True)]
        worker_group.execute(_setup, addresses, backend_config.legacy_keras)

    def on_shutdown(self, worker_group, backend_config: TensorflowConfig) -> None:
        worker_group.execute(_teardown)
