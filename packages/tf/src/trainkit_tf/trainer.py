"""``TensorflowTrainer``: a ``DataParallelTrainer`` that only picks the default config."""

from __future__ import annotations

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

    config_cls = TensorflowConfig
    config_arg = "tensorflow_config"
