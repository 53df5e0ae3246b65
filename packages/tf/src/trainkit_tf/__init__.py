"""trainkit-tf: TensorFlow on trainkit. Importing it imports no TensorFlow (``ReportCallback``
does, when first used).

Example::

    import tensorflow as tf, trainkit
    from trainkit_tf import ReportCallback, TensorflowTrainer, prepare_dataset_shard

    def train_fn(config):
        strategy = tf.distribute.MultiWorkerMirroredStrategy()     # spans every worker
        with strategy.scope():
            model = tf.keras.Sequential([...])                     # tf-keras where installed
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        data = tf.data.Dataset.from_tensor_slices((trainkit.shard(x), trainkit.shard(y)))
        model.fit(prepare_dataset_shard(data.repeat().batch(32)), epochs=3, steps_per_epoch=20,
                  callbacks=[ReportCallback()])

    result = TensorflowTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    model = ReportCallback.get_model(result.checkpoint)
"""

from trainkit.lazy import lazy_exports

from trainkit_tf.checkpoint import KerasCheckpointIO
from trainkit_tf.config import TensorflowConfig
from trainkit_tf.data import prepare_dataset_shard
from trainkit_tf.loop import fit_loop
from trainkit_tf.trainer import TensorflowTrainer

__all__ = ["KerasCheckpointIO", "ReportCallback", "TensorflowConfig", "TensorflowTrainer", "fit_loop",
           "prepare_dataset_shard"]


# ReportCallback is built on tf.keras: imported when used, after the worker picked its Keras.
__getattr__ = lazy_exports(__name__, {"ReportCallback": "trainkit_tf.callback"})
