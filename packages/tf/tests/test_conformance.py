"""trainkit-tf against trainkit.testing's conformance suites (2 CPU processes, TensorFlow's own
collectives under MultiWorkerMirroredStrategy)."""

import functools
import os

import numpy as np

from trainkit.testing import NOT_PROVIDED, BackendConformance, CheckpointConformance
from trainkit_tf import KerasCheckpointIO, TensorflowConfig


@functools.cache
def strategy():
    import tensorflow as tf

    return tf.distribute.MultiWorkerMirroredStrategy()  # once per process: TensorFlow's collectives start once


def framework_rank() -> int:
    return strategy().cluster_resolver.task_id


def all_gather(value: float) -> list[float]:
    import tensorflow as tf

    @tf.function
    def gather():
        return strategy().run(
            lambda: tf.distribute.get_replica_context().all_gather(tf.constant([value], tf.float32), axis=0))

    return [float(v) for v in strategy().experimental_local_results(gather())[0].numpy()]


def is_initialized() -> bool:
    return "TF_CONFIG" in os.environ  # TensorFlow's collectives can't be shut down; the backend's cluster env can


class TestTensorflowBackend(BackendConformance):
    backend_config = TensorflowConfig()
    framework_modules = ("tensorflow", "keras", "tf_keras")
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
    shard = NOT_PROVIDED("not written for trainkit-tf yet (issue 57 follow-up): prepare_dataset_shard")
    report_callback = NOT_PROVIDED("not written for trainkit-tf yet (issue 57 follow-up): the Keras ReportCallback")
    journey = NOT_PROVIDED("not written for trainkit-tf yet (issue 57 follow-up): a Keras fit with ReportCallback")


class TestKerasCheckpointIO(CheckpointConformance):
    checkpoint_io = KerasCheckpointIO()
    resume = NOT_PROVIDED("not written for trainkit-tf yet (issue 57 follow-up): KerasCheckpointIO.load")

    def make_state(self, seed):
        import keras

        keras.utils.set_random_seed(seed)

        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        model.fit(np.ones((8, 3), "float32"), np.zeros((8, 1), "float32"), epochs=2, verbose=0)
        return model

    def assert_same(self, loaded, saved):
        for a, b in zip(loaded.get_weights(), saved.get_weights(), strict=True):
            assert np.array_equal(a, b)
        assert int(loaded.optimizer.iterations.numpy()) == int(saved.optimizer.iterations.numpy()) == 2
