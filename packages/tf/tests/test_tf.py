"""TensorFlow across 2 real trainkit workers: MultiWorkerMirroredStrategy spans them, with tf-keras's
``model.fit`` and with Keras 3 in ``fit_loop``; metrics, checkpoints and resume."""

import numpy as np
import pytest

import trainkit
from trainkit import FailureConfig, ScalingConfig, TrainingFailedError, collective
from trainkit_tf import KerasCheckpointIO, TensorflowConfig, TensorflowTrainer, fit_loop, prepare_dataset_shard

STEPS = 4


class Recorder(trainkit.UserCallback):
    def __init__(self):
        self.reports = []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append((run_context.attempt, metrics, checkpoint))


def train_fn(config):
    """A small classifier on rank-specific random data; fails once on rank 1 when asked."""
    import tensorflow as tf

    from trainkit_tf import ReportCallback

    keras = tf.keras if config["flavour"] == "tf_keras" else __import__("keras")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # first: before any TensorFlow op
    context = trainkit.get_context()
    rng = np.random.default_rng(context.get_world_rank())  # a different shard on every rank
    x = rng.normal(size=(64, 8)).astype("float32")
    y = (x[:, 0] > 0).astype("int64")
    dataset = prepare_dataset_shard(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16))
    with strategy.scope():
        if checkpoint := trainkit.get_checkpoint():
            model = KerasCheckpointIO().load(checkpoint)
        else:
            keras.utils.set_random_seed(context.get_world_rank())  # different initial weights per rank
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                      keras.layers.Dense(2)])
            model.compile(optimizer=keras.optimizers.SGD(0.1),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    initial_epoch = int(model.optimizer.iterations.numpy()) // STEPS

    class Fail(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == config.get("fail_at") and context.get_attempt() == 0:
                collective.barrier()  # the last epoch's report returned on every rank: it commits
                if context.get_world_rank() == 1:
                    raise RuntimeError("injected failure")

    callbacks = [Fail(), ReportCallback(metrics=["loss"])]
    kwargs = {"epochs": config["epochs"], "steps_per_epoch": STEPS, "initial_epoch": initial_epoch,
              "callbacks": callbacks}
    if config["loop"] == "fit":
        model.fit(dataset, verbose=0, **kwargs)
    else:
        fit_loop(model, dataset, **kwargs)
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    trainkit.report({"weights": weights.tolist(), "initial_epoch": initial_epoch, "module": type(model).__module__,
                     "iterations": int(model.optimizer.iterations.numpy())})


def fit(run_config, recorder, failures=0, tensorflow_config=None, **config):
    return TensorflowTrainer(train_fn, train_loop_config={"epochs": 3, **config}, tensorflow_config=tensorflow_config,
                             scaling_config=ScalingConfig(num_workers=2),
                             run_config=run_config(callbacks=[recorder],
                                                   failure_config=FailureConfig(max_failures=failures))).fit()


@pytest.mark.parametrize("flavour, loop", [("tf_keras", "fit"), ("keras", "fit_loop")])
def test_replicas_stay_identical_metrics_and_checkpoints_arrive(ray_cluster, run_config, flavour, loop):
    recorder = Recorder()
    result = fit(run_config, recorder, flavour=flavour, loop=loop)
    *epochs, (_, final, _) = recorder.reports
    assert [checkpoint is not None for _, _, checkpoint in epochs] == [True] * 3
    losses = [metrics[0]["loss"] for _, metrics, _ in epochs]
    assert losses[-1] < losses[0]
    assert final[0]["module"].startswith(flavour) and final[0]["iterations"] == 3 * STEPS
    # Different initial weights and different data on each rank, yet identical weights after training:
    # the strategy broadcast the initial values and all-reduced every gradient.
    assert final[0]["weights"] == final[1]["weights"]
    model = KerasCheckpointIO().load(result.checkpoint)
    saved = np.concatenate([w.ravel() for w in model.get_weights()])
    assert np.allclose(saved, final[0]["weights"])
    assert type(model).__module__.startswith(flavour)  # loaded by the Keras that wrote it


@pytest.mark.parametrize("flavour, loop", [("tf_keras", "fit"), ("keras", "fit_loop")])
def test_resumes_from_the_last_checkpoint_after_a_failure(ray_cluster, run_config, flavour, loop):
    recorder = Recorder()
    fit(run_config, recorder, failures=1, flavour=flavour, loop=loop, fail_at=2)
    assert [attempt for attempt, *_ in recorder.reports] == [0, 0, 1, 1]  # epochs 0 and 1, then 2 and the end
    _, final, _ = recorder.reports[-1]
    assert final[0]["initial_epoch"] == 2 and final[0]["iterations"] == 3 * STEPS
    assert final[0]["weights"] == final[1]["weights"]


def test_keras3_fit_across_workers_fails_with_the_two_supported_ways(ray_cluster, run_config):
    with pytest.raises(TrainingFailedError) as info:
        fit(run_config, Recorder(), flavour="keras", loop="fit")
    message = f"{info.value} {info.value.worker_traceback}"
    assert "keras-team/keras#20585" in message and "tf-keras" in message and "fit_loop" in message


def keras_flavour_fn(config):
    import tensorflow as tf

    trainkit.report({"tf_keras": tf.keras.__name__.startswith("tf_keras")})


@pytest.mark.parametrize("legacy_keras, expected", [(True, True), (False, False)])  # None: the tests above
def test_legacy_keras_picks_the_workers_tf_keras(ray_cluster, run_config, legacy_keras, expected):
    recorder = Recorder()
    TensorflowTrainer(keras_flavour_fn, tensorflow_config=TensorflowConfig(legacy_keras=legacy_keras),
                      scaling_config=ScalingConfig(num_workers=2), run_config=run_config(callbacks=[recorder])).fit()
    (_, metrics, _), = recorder.reports
    assert [m["tf_keras"] for m in metrics] == [expected, expected]


def test_bad_settings_name_the_field():
    from trainkit_tf import ReportCallback

    with pytest.raises(ValueError, match="legacy_keras='yes' is invalid"):
        TensorflowConfig(legacy_keras="yes")
    with pytest.raises(ValueError, match="checkpoint_on='epoch_stop' is invalid: expected one or a list of"):
        ReportCallback(checkpoint_on="epoch_stop")
    with pytest.raises(ValueError, match="report_metrics_on=\\[\\] is invalid"):
        ReportCallback(report_metrics_on=[])
    with pytest.raises(ValueError, match="metrics="):
        ReportCallback(metrics=3)
    with pytest.raises(ValueError, match="filename='model.h5' is invalid"):
        KerasCheckpointIO("model.h5")
    with pytest.raises(TypeError, match="tensorflow_config must be a TensorflowConfig"):
        TensorflowTrainer(train_fn, tensorflow_config={})
    with pytest.raises(ValueError, match="steps_per_epoch=0 is invalid"):
        fit_loop(object(), None, epochs=1, steps_per_epoch=0)


def test_tf_keras_models_save_as_keras_files_again_and_again_in_any_thread(tmp_path):
    import threading
    import zipfile

    import tf_keras

    model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    directories = [tmp_path / str(i) for i in range(2)]

    def save_twice():  # tf-keras alone would write the second file as HDF5 outside its importing thread
        for directory in directories:
            directory.mkdir()
            KerasCheckpointIO().save(model, str(directory))

    thread = threading.Thread(target=save_twice)
    thread.start()
    thread.join()
    for directory in directories:
        assert zipfile.is_zipfile(directory / "model.keras")
        loaded = KerasCheckpointIO().load_from_directory(str(directory))
        assert type(loaded).__module__.startswith("tf_keras")


def test_keras_module_looks_past_user_subclasses():
    import keras
    import tf_keras

    from trainkit_tf.checkpoint import keras_module

    class Mine(keras.Sequential):
        pass

    assert keras_module(Mine()).__name__ == "keras"
    assert keras_module(tf_keras.layers.Dense(1)).__name__ == "tf_keras"
    with pytest.raises(TypeError, match="expected a Keras object, got a object"):
        keras_module(object())
