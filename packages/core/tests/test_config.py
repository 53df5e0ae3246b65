import pytest

import trainkit
from trainkit import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig


@pytest.mark.parametrize("value", [True, False, -1, 2.5, "2", (2, 1), (0, 0), (1, 2, 3), None, 10**6])
def test_num_workers_rejected_with_field_and_value(value):
    with pytest.raises(ValueError, match=r"num_workers.*invalid") as info:
        ScalingConfig(num_workers=value)
    assert repr(value) in str(info.value) or "num_workers[" in str(info.value)


@pytest.mark.parametrize("value", [0, 1, 16, (1, 4), [2, 2]])
def test_num_workers_accepted(value):
    config = ScalingConfig(num_workers=value)
    assert config.min_workers <= config.max_workers
    assert config.elastic == isinstance(value, (tuple, list))


@pytest.mark.parametrize("resources", [{"CPU": -1}, {"GPU": float("nan")}, {"CPU": "1"}, {"": 1}, [("CPU", 1)]])
def test_bad_resources_rejected(resources):
    with pytest.raises(ValueError, match="resources_per_worker"):
        ScalingConfig(resources_per_worker=resources)


def test_worker_resources_defaults_and_gpu():
    assert ScalingConfig().worker_resources == {"CPU": 1.0}
    assert ScalingConfig(use_gpu=True).worker_resources == {"CPU": 1.0, "GPU": 1.0}
    assert ScalingConfig(resources_per_worker={"CPU": 0.5}).worker_resources == {"CPU": 0.5}
    with pytest.raises(ValueError, match="GPU"):
        ScalingConfig(use_gpu=True, resources_per_worker={"CPU": 1}).worker_resources


V4 = {"use_tpu": True, "topology": "2x2x2", "accelerator_type": "TPU-V4"}  # 8 chips: 2 hosts of 4


def test_tpu_slices_shape_the_workers():
    four = ScalingConfig(num_workers=4, **V4)
    assert four.worker_resources == {"CPU": 1.0, "TPU": 4.0, "accelerator_type:TPU-V4": 0.001}  # a host each
    assert four.workers_per_slice == 2 and four.tpu_slice.pod_type == "v4-16" and four.tpu_slice.hosts == 2
    per_chip = ScalingConfig(num_workers=16, use_tpu=True, topology="4x4", accelerator_type="TPU-V6E",
                             resources_per_worker={"CPU": 1, "TPU": 1})
    assert per_chip.workers_per_slice == 16 and per_chip.tpu_slice.pod_type == "v6e-16"
    assert ScalingConfig(use_tpu=True, topology="2x4", accelerator_type="TPU-V6E").tpu_slice.hosts == 1  # 8-chip host
    assert ScalingConfig(use_tpu=True).worker_resources == {"CPU": 1.0, "TPU": 1.0}  # one host, shape unknown


@pytest.mark.parametrize("kwargs, message", [
    ({"num_workers": 3, **V4}, "num_workers=3 is invalid: expected a multiple of 2"),
    ({"num_workers": (2, 4), **V4}, r"num_workers=\(2, 4\) is invalid: expected a fixed number"),
    ({"num_workers": 2, "use_tpu": True}, "topology=None is invalid: expected a TPU topology"),
    ({**V4, "accelerator_type": "A100"}, "accelerator_type='A100' is invalid with use_tpu=True: expected one of TPU-V2"),
    ({**V4, "topology": "2by2"}, "topology='2by2' is invalid"),
    ({**V4, "resources_per_worker": {"CPU": 1, "TPU": 3}}, r'resources_per_worker\["TPU"\]=3.0 is invalid'),
    ({**V4, "resources_per_worker": {"CPU": 1}}, 'expected a "TPU" amount > 0'),
    ({**V4, "use_gpu": True}, "use_tpu=True is invalid: expected not together with use_gpu"),
    ({"topology": "2x2"}, "use_tpu=False is invalid"),
    ({"resources_per_worker": {"TPU": 4}}, "use_tpu=False is invalid"),
])
def test_bad_tpu_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ScalingConfig(**kwargs)


@pytest.mark.parametrize("kwargs, field", [
    ({"placement_strategy": "pack"}, "placement_strategy"),
    ({"use_gpu": 1}, "use_gpu"),
    ({"elastic_resize_monitor_interval_s": 0}, "elastic_resize_monitor_interval_s"),
    ({"label_selector": {"a": 1}}, "label_selector"),
])
def test_other_scaling_fields(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ScalingConfig(**kwargs)


@pytest.mark.parametrize("name", ["../x", "/abs", "a/../../b", "..", ".", "a\0b", "x" * 300, "ｘ", "", "-lead"])
def test_run_names_that_would_escape_are_rejected(name):
    with pytest.raises(ValueError, match="name="):
        RunConfig(name=name)


@pytest.mark.parametrize("name", ["train-trial_id=abc", "trial_lr=0.1,bs=32", "run.v2"])
def test_ray_tune_run_names_are_accepted(name):
    assert RunConfig(name=name).name == name


def test_failure_and_checkpoint_config_validation():
    assert FailureConfig(max_failures=-1).max_failures == -1
    for bad in (-2, 1.5, True, "3"):
        with pytest.raises(ValueError, match="max_failures"):
            FailureConfig(max_failures=bad)
    assert FailureConfig().progress_timeout_s == 3600 and FailureConfig(progress_timeout_s=None).progress_timeout_s is None
    for bad in (0, -1, float("inf"), True, "60"):
        with pytest.raises(ValueError, match=r"progress_timeout_s=.* None \(off\) or a finite number of seconds > 0"):
            FailureConfig(progress_timeout_s=bad)
    with pytest.raises(ValueError, match="num_to_keep"):
        CheckpointConfig(num_to_keep=0)
    with pytest.raises(ValueError, match="checkpoint_score_order"):
        CheckpointConfig(checkpoint_score_order="best")
    with pytest.raises(ValueError, match="failure_config"):
        RunConfig(failure_config={"max_failures": 1})
    with pytest.raises(ValueError, match="verbose"):
        RunConfig(verbose=5)


def test_ray_train_run_config_fields():
    config = RunConfig(logging_config=trainkit.LoggingConfig(log_level="debug"), sync_config=trainkit.SyncConfig())
    assert config.logging_config.log_level == "DEBUG"
    with pytest.raises(ValueError, match="log_level='loud'.*DEBUG, INFO"):
        trainkit.LoggingConfig(log_level="loud")
    with pytest.raises(ValueError, match="sync_config"):
        RunConfig(sync_config={"sync_period": 1})


def test_ray_train_preemption_settings_with_ray_defaults():
    config = FailureConfig(max_preemption_failures=3, relax_collectives_on_preemption=True, preemption_grace_s=5)
    assert (config.max_preemption_failures, config.relax_collectives_on_preemption, config.preemption_grace_s) \
        == (3, True, 5.0)
    default = FailureConfig()
    assert (default.max_preemption_failures, default.relax_collectives_on_preemption, default.preemption_grace_s) \
        == (-1, False, 0.0)  # Ray Train 2.60's


@pytest.mark.parametrize("field, value, allowed", [
    ("max_preemption_failures", -2, "an int >= -1"), ("max_preemption_failures", 1.5, "an int >= -1"),
    ("max_preemption_failures", True, "an int >= -1"), ("relax_collectives_on_preemption", 1, "True or False"),
    ("preemption_grace_s", -1, "a finite number >= 0"), ("preemption_grace_s", float("inf"), "a finite number >= 0"),
    ("preemption_grace_s", "5", "a finite number >= 0")])
def test_bad_preemption_settings_name_the_field_and_what_is_allowed(field, value, allowed):
    with pytest.raises(ValueError, match=f"{field}={value!r} is invalid: expected {allowed}"):
        FailureConfig(**{field: value})


def test_get_preemption_info_is_none_without_a_preemption(tmp_path):
    def train_fn():
        return trainkit.get_preemption_info()

    result = trainkit.DataParallelTrainer(train_fn, scaling_config=ScalingConfig(num_workers=0),
                                          run_config=RunConfig(storage_path=str(tmp_path), verbose=0)).fit()
    assert result.return_value is None
    with pytest.raises(RuntimeError, match="get_preemption_info"):
        trainkit.get_preemption_info()  # outside a training function
