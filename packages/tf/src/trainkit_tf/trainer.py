"""``TensorflowTrainer``: a ``DataParallelTrainer`` that only picks the default config."""

from __future__ import annotations

from typing import Any, Callable

from trainkit import DataParallelTrainer

from trainkit_tf.config import TensorflowConfig


class TensorflowTrainer(DataParallelTrainer):
    """Run a TensorFlow function on every worker with ``TF_CONFIG`` set: a
    ``tf.distribute.MultiWorkerMirroredStrategy()`` created there spans all workers.

    Example::

        def train_fn(config):
            strategy = tf.distribute.MultiWorkerMirroredStrategy()
            with strategy.scope():
                model = build_and_compile_model()
            model.fit(dataset, epochs=3, steps_per_epoch=10, callbacks=[ReportCallback()])

        TensorflowTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    """

    def __init__(self, train_loop_per_worker: Callable, *, tensorflow_config: TensorflowConfig | None = None,
                 **kwargs: Any):
        if tensorflow_config is not None and not isinstance(tensorflow_config, TensorflowConfig):
            raise TypeError(f"tensorflow_config must be a TensorflowConfig, got {type(tensorflow_config).__name__}")
        kwargs.setdefault("backend_config", tensorflow_config or TensorflowConfig())
        super().__init__(train_loop_per_worker, **kwargs)
