"""Keras with MultiWorkerMirroredStrategy written for Ray Train 2.x (its documented
ray.train.tensorflow API). packages/tf/tests/test_ray_train_compat.py migrates it with
`trainkit migrate` and runs it on trainkit. It ran on Ray Train 2.60 once,
with TensorFlow 2.21: there it needs TF_USE_LEGACY_KERAS=1 set in the script (without it the
workers' tf.keras was Keras 3, whose fit fails across workers: keras-team/keras#20585)."""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is tf-keras, here and on the workers

import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import ray.train  # noqa: E402
from ray.train import RunConfig, ScalingConfig  # noqa: E402
from ray.train.tensorflow import TensorflowTrainer, prepare_dataset_shard  # noqa: E402
from ray.train.tensorflow.keras import ReportCheckpointCallback  # noqa: E402


def train_func(config):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(64, activation="relu"),
                                     tf.keras.layers.Dense(10)])
        model.compile(optimizer=tf.keras.optimizers.Adam(1e-2), metrics=["accuracy"],
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rank, size = ray.train.get_context().get_world_rank(), ray.train.get_context().get_world_size()
    x, y = load_digits(return_X_y=True)
    x, y = x[rank::size] / 16, y[rank::size]
    dataset = prepare_dataset_shard(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64))
    model.fit(dataset, epochs=config["epochs"], steps_per_epoch=10, verbose=0,
              callbacks=[ReportCheckpointCallback(metrics={"loss": "loss", "accuracy": "accuracy"})])


if __name__ == "__main__":
    result = TensorflowTrainer(
        train_func,
        train_loop_config={"epochs": 3},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="tensorflow_digits"),
    ).fit()
    print("epochs:", len(result.metrics_dataframe))
    print(result.metrics)
