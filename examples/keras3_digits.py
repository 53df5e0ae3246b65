"""A Keras 3 MLP on scikit-learn's bundled digits, data-parallel across 2 CPU workers with
``trainkit_tf.fit_loop``.

Keras 3's own ``model.fit`` cannot train across workers under ``MultiWorkerMirroredStrategy``
(an open upstream limitation, keras-team/keras#20585; trainkit-tf raises a clear error instead).
``fit_loop`` is a custom training loop with ``fit``'s shape: each step runs in ``strategy.run``,
so the gradients are all-reduced across the workers, which keep identical weights.

    pip install trainkit-tf
    python examples/keras3_digits.py
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import trainkit
from trainkit_tf import ReportCallback, TensorflowConfig, TensorflowTrainer, fit_loop, prepare_dataset_shard


def digits(part: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    return (x_train, y_train) if part == "train" else (x_test, y_test)


def train_fn(config: dict) -> None:
    import keras
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # first, before any TensorFlow op
    x, y = digits("train")
    x, y = trainkit.shard(x.astype("float32")), trainkit.shard(y)  # this worker's rows
    steps = len(x) // config["batch_size"]
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat().batch(config["batch_size"])
    with strategy.scope():
        if checkpoint := trainkit.get_checkpoint():  # resume after a failure
            model = ReportCallback.get_model(checkpoint)
        else:
            model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                      keras.layers.Dense(10)])
            model.compile(optimizer=keras.optimizers.Adam(config["lr"]),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    fit_loop(model, prepare_dataset_shard(dataset), epochs=config["epochs"], steps_per_epoch=steps,
             initial_epoch=int(model.optimizer.iterations.numpy()) // steps,
             callbacks=[ReportCallback()])  # loss and a checkpoint every epoch
    x_test, y_test = digits("test")
    predicted = np.argmax(model(x_test.astype("float32"), training=False), axis=1)
    trainkit.report({"test_accuracy": float(np.mean(predicted == y_test)), "epochs": config["epochs"]})


def main() -> trainkit.Result:
    result = TensorflowTrainer(train_fn, train_loop_config={"lr": 0.01, "epochs": 5, "batch_size": 32},
                               tensorflow_config=TensorflowConfig(legacy_keras=False),  # tf.keras is Keras 3 too
                               scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    print(f"epochs: {result.metrics['epochs']}")
    print(f"held-out test accuracy: {result.metrics['test_accuracy']:.3f}")
    return result


if __name__ == "__main__":
    main()
