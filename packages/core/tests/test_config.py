import pytest

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


def test_failure_and_checkpoint_config_validation():
    assert FailureConfig(max_failures=-1).max_failures == -1
    for bad in (-2, 1.5, True, "3"):
        with pytest.raises(ValueError, match="max_failures"):
            FailureConfig(max_failures=bad)
    with pytest.raises(ValueError, match="num_to_keep"):
        CheckpointConfig(num_to_keep=0)
    with pytest.raises(ValueError, match="checkpoint_score_order"):
        CheckpointConfig(checkpoint_score_order="best")
    with pytest.raises(ValueError, match="failure_config"):
        RunConfig(failure_config={"max_failures": 1})
    with pytest.raises(ValueError, match="verbose"):
        RunConfig(verbose=5)
