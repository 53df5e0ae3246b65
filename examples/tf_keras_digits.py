"""A Keras MLP on scikit-learn's bundled digits with tf-keras's ``model.fit``, data-parallel across
2 CPU workers.

``TensorflowTrainer`` gives every worker a port and a ``TF_CONFIG`` naming both, so the
``MultiWorkerMirroredStrategy`` each worker creates spans the two: every step all-reduces the
gradients, and both workers keep identical weights while each trains on its own half of the rows.
With tf-keras installed, the workers' ``tf.keras`` is tf-keras (Keras 2), whose ``fit`` trains
across workers; for Keras 3 see ``examples/keras3_digits.py``.

    pip install 'trainkit-tf[tf-keras]'
    python examples/tf_keras_digits.py
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import trainkit
from trainkit_tf import ReportCallback, TensorflowTrainer, prepare_dataset_shard


def digits(part: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    return (x_train, y_train) if part == "train" else (x_test, y_test)


def train_fn(config: dict) -> None:
    import tensorflow as tf  # tf.keras is tf-keras here: the worker picked its Keras before this runs

    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # first, before any TensorFlow op
    x, y = digits("train")
    x, y = trainkit.shard(x.astype("float32")), trainkit.shard(y)  # this worker's rows
    steps = len(x) // config["batch_size"]
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat().batch(config["batch_size"])
    with strategy.scope():  # variables created here are mirrored on every worker
        if checkpoint := trainkit.get_checkpoint():  # resume after a failure
            model = ReportCallback.get_model(checkpoint)
        else:
            model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(64, activation="relu"),
                                         tf.keras.layers.Dense(10)])
            model.compile(optimizer=tf.keras.optimizers.Adam(config["lr"]), metrics=["accuracy"],
                          loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(prepare_dataset_shard(dataset), epochs=config["epochs"], steps_per_epoch=steps, verbose=0,
              initial_epoch=int(model.optimizer.iterations.numpy()) // steps,
              callbacks=[ReportCallback(metrics=["loss", "accuracy"])])  # a checkpoint every epoch
    x_test, y_test = digits("test")
    predicted = np.argmax(model(x_test.astype("float32"), training=False), axis=1)
    trainkit.report({"test_accuracy": float(np.mean(predicted == y_test)), "epochs": config["epochs"]})


def main() -> trainkit.Result:
    result = TensorflowTrainer(train_fn, train_loop_config={"lr": 0.01, "epochs": 5, "batch_size": 32},
                               scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    print(f"epochs: {result.metrics['epochs']}")
    print(f"held-out test accuracy: {result.metrics['test_accuracy']:.3f}")
    return result


if __name__ == "__main__":
    main()
