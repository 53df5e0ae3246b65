"""``prepare_dataset_shard``: a ``tf.data.Dataset`` that trainkit already sharded, fed as it is."""

from __future__ import annotations

from typing import Any


def prepare_dataset_shard(dataset: Any) -> Any:
    """``dataset`` with TensorFlow's auto-sharding off (each worker already holds only its rows, e.g.
    from ``trainkit.shard`` or ``trainkit.get_dataset_shard``) and prefetching on. Without it,
    ``MultiWorkerMirroredStrategy`` would shard the shard again, dropping rows.

    Example::

        x, y = trainkit.shard(features), trainkit.shard(labels)
        dataset = prepare_dataset_shard(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32))
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)
