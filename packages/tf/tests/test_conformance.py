"""trainkit-tf against trainkit.testing's conformance suites (2 CPU processes, TensorFlow's own
collectives under MultiWorkerMirroredStrategy)."""

import functools

import numpy as np

from trainkit.testing import BackendConformance, CheckpointConformance
from trainkit_tf import KerasCheckpointIO, TensorflowConfig


@functools.cache
def strategy():
    import tensorflow as tf

    return tf.distribute.MultiWorkerMirroredStrategy()  # once per process: TensorFlow's collectives start once


def all_reduce_sum(value: float) -> float:
    import tensorflow as tf

    @tf.function
    def reduce():
        return strategy().run(lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.constant(value)))

    return float(strategy().experimental_local_results(reduce())[0])


class TestTensorflowBackend(BackendConformance):
    backend_config = TensorflowConfig()
    framework_modules = ("tensorflow", "keras", "tf_keras")
    all_reduce_sum = staticmethod(all_reduce_sum)


class TestKerasCheckpointIO(CheckpointConformance):
    checkpoint_io = KerasCheckpointIO()

    def make_state(self):
        import keras

        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
        model.fit(np.ones((8, 3), "float32"), np.zeros((8, 1), "float32"), epochs=2, verbose=0)
        return model

    def assert_same(self, loaded, saved):
        for a, b in zip(loaded.get_weights(), saved.get_weights(), strict=True):
            assert np.array_equal(a, b)
        assert int(loaded.optimizer.iterations.numpy()) == int(saved.optimizer.iterations.numpy()) == 2
