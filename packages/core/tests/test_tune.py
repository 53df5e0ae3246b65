"""trainkit trainers as Ray Tune trials, for real: each trial's workers sit in the trial's own
reservation, metrics and checkpoints reach Tune's ResultGrid, ASHA stops trials and their workers."""

import os
import tempfile
import time

import pytest

import trainkit
from trainkit import Checkpoint, DataParallelTrainer, ScalingConfig
from trainkit.testing import requires

tune = pytest.importorskip("ray.tune", reason="Ray Tune is trainkit's 'tune' extra")
from trainkit.tune import TuneReportCallback, trial_resources  # noqa: E402

pytestmark = requires(ray=">=2.41")  # ray.tune.report / Checkpoint / RunConfig (ray-project/ray#49317)

# 2 workers x 1 CPU: a trial takes 2 of the fixture's 4 CPUs, so 2 trials run at a time. Without the
# reservation Tune would start 4 trials (1 CPU each) whose workers then find no CPU left.
SCALING = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1})
EPOCHS = 4


def train_fn(config):
    import ray

    for epoch in range(EPOCHS):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "state.txt"), "w") as f:
                f.write(f"x={config['x']} epoch={epoch}")
            trainkit.report({"score": config["x"] * (epoch + 1), "epoch": epoch,
                             "placement_group": ray.get_runtime_context().get_placement_group_id(),
                             "trial_group": config["trial_group"]},
                            checkpoint=Checkpoint.from_directory(tmp))


def make_trial(runs_path):
    def trial(config):
        import ray

        trial_group = ray.util.get_current_placement_group()
        DataParallelTrainer(
            train_fn, train_loop_config={**config, "trial_group": trial_group.id.hex()}, scaling_config=SCALING,
            run_config=trainkit.RunConfig(name=tune.get_context().get_trial_name(), storage_path=runs_path,
                                          verbose=0, callbacks=[TuneReportCallback()])).fit()

    return trial


def alive_workers(ray):
    return [a for a in ray._private.state.actors().values()
            if a["State"] == "ALIVE" and a["ActorClassName"] == "Worker"]


def test_asha_search_reports_to_tune_and_frees_stopped_trials(ray_cluster, tmp_path):
    from ray.tune.schedulers import ASHAScheduler

    ray = ray_cluster
    total = ray.cluster_resources()["CPU"]
    tuner = tune.Tuner(
        tune.with_resources(make_trial(str(tmp_path / "runs")), trial_resources(SCALING)),
        param_space={"x": tune.grid_search([4, 3, 2, 1])},  # later trials score lower: ASHA stops them
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=ASHAScheduler(
            time_attr="training_iteration", max_t=EPOCHS, grace_period=1, reduction_factor=2)),
        run_config=tune.RunConfig(name="search", storage_path=str(tmp_path / "tune"), verbose=0),
    )
    results = tuner.fit()
    assert results.num_errors == 0, [r.error for r in results]
    stopped = [r for r in results if r.metrics["training_iteration"] < EPOCHS]
    print(f"trials: {len(results)}, stopped early by ASHA: {len(stopped)}, "
          f"best x: {results.get_best_result().config['x']}")
    assert len(results) == 4 and stopped
    for result in results:
        x, iterations = result.config["x"], result.metrics["training_iteration"]
        assert result.metrics["score"] == x * iterations
        # the workers ran in the trial's own placement group
        assert result.metrics["placement_group"] == result.metrics["trial_group"] is not None
        assert list(result.metrics_dataframe["score"]) == [x * (i + 1) for i in range(iterations)]
        with result.checkpoint.as_directory() as path:  # the last committed checkpoint reached Tune
            assert open(os.path.join(path, "state.txt")).read() == f"x={x} epoch={iterations - 1}"
    assert results.get_best_result().config["x"] == 4
    # stopped trials' workers are gone and every reservation is back
    deadline = time.monotonic() + 120  # a guard: Tune removes a finished trial's placement group asynchronously
    while (alive_workers(ray) or ray.available_resources().get("CPU") != total) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive_workers(ray) == []
    assert ray.available_resources().get("CPU") == total


def test_trial_resources_reserves_the_trial_and_each_worker():
    factory = trial_resources(ScalingConfig(num_workers=3, resources_per_worker={"CPU": 0.5, "memory": 1e8}),
                              trial_cpus=0.25)
    assert factory.bundles == [{"CPU": 0.25}] + [{"CPU": 0.5, "memory": 1e8}] * 3
    assert trial_resources(ScalingConfig(num_workers=2)).bundles == [{"CPU": 1.0}] * 2  # empty trial bundle
    with pytest.raises(ValueError, match="scaling_config.num_workers=0 is invalid"):
        trial_resources(ScalingConfig(num_workers=0))
    with pytest.raises(ValueError, match="trial_cpus=-1 is invalid"):
        trial_resources(SCALING, trial_cpus=-1)
    with pytest.raises(TypeError, match="scaling_config must be a trainkit.ScalingConfig"):
        trial_resources({"num_workers": 2})


def test_report_callback_outside_a_trial_says_where_it_belongs():
    with pytest.raises(RuntimeError, match="create it inside the function that Tune runs"):
        TuneReportCallback()


def test_trial_that_reserved_nothing_for_its_workers_fails_at_once_naming_the_fix(ray_cluster, tmp_path):
    """The trial takes every CPU for itself (``with_resources(trial, {"cpu": 4})``): its trainer's
    workers could never be placed. It fails on the first try instead of after placement timeouts."""
    tuner = tune.Tuner(tune.with_resources(make_trial(str(tmp_path / "runs")), {"cpu": 4}),
                       param_space={"x": 1},
                       run_config=tune.RunConfig(name="unreserved", storage_path=str(tmp_path / "tune"), verbose=0))
    results = tuner.fit()
    assert results.num_errors == 1
    message = str(results[0].error)
    assert "trainkit.tune.trial_resources(scaling_config)" in message and "holds no bundles for its 2 workers" in message
    assert "within" not in message, message[:3000]  # not the placement timeout's error
