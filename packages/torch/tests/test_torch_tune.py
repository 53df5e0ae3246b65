"""Ray Train's documented Tune pattern, moved over as is: a Tune trial with default resources whose
function fits a TorchTrainer with a default ScalingConfig. The trainer places its 2 workers itself,
outside the trial's 1-CPU reservation (as Ray Train V2 does); one that can never fit fails at once."""

import pytest

import trainkit
from trainkit import ScalingConfig
from trainkit.testing import requires
from trainkit_torch import TorchTrainer

tune = pytest.importorskip("ray.tune", reason="Ray Tune is trainkit's 'tune' extra")

pytestmark = requires(ray=">=2.41")


def all_reduce_fn(config):
    import torch
    import torch.distributed as dist

    ctx = trainkit.get_context()
    ranks = torch.tensor([float(ctx.get_world_rank())])
    dist.all_reduce(ranks)  # a real 2-rank gloo group
    trainkit.report({"world_size": ctx.get_world_size(), "rank_sum": ranks.item(), "x": config["x"]})


def make_trial(runs_path, scaling):
    def train_driver_fn(config):
        from trainkit.tune import TuneReportCallback

        TorchTrainer(all_reduce_fn, train_loop_config=config, scaling_config=scaling,
                     run_config=trainkit.RunConfig(name=tune.get_context().get_trial_name(), storage_path=runs_path,
                                                   verbose=0, callbacks=[TuneReportCallback()])).fit()

    return train_driver_fn


@pytest.mark.timeout(600)
@pytest.mark.parametrize("scaling", [ScalingConfig(), ScalingConfig(num_workers=2)], ids=["default", "2-workers"])
def test_documented_tune_pattern_places_the_workers_itself(ray_cluster, tmp_path, scaling):
    """The trial holds Tune's default 1 CPU (its first bundle); the workers get a group of their own.
    With one worker that bundle used to be taken for the worker's: Ray refused it ("No trial
    resources are available"), and a retry's worker waited for it forever."""
    tuner = tune.Tuner(make_trial(str(tmp_path / "runs"), scaling),  # the trial: Tune's default resources
                       param_space={"x": 1},
                       run_config=tune.RunConfig(name="documented", storage_path=str(tmp_path / "tune"), verbose=0))
    results = tuner.fit()
    assert results.num_errors == 0, [str(r.error)[:2000] for r in results]
    world_size = scaling.num_workers
    assert results[0].metrics["world_size"] == world_size
    assert results[0].metrics["rank_sum"] == sum(range(world_size))


@pytest.mark.timeout(300)
def test_tune_trial_whose_workers_can_never_fit_fails_at_once(ray_cluster, tmp_path):
    """4 workers x 1 CPU next to the trial's 1 CPU, on a 4-CPU cluster: never placeable. The error
    names the resources, at once: not after a placement timeout, nor after one per attempt."""
    tuner = tune.Tuner(make_trial(str(tmp_path / "runs"), ScalingConfig(num_workers=4)),
                       param_space={"x": 1},
                       run_config=tune.RunConfig(name="too_big", storage_path=str(tmp_path / "tune"), verbose=0))
    results = tuner.fit()
    assert results.num_errors == 1
    message = str(results[0].error)
    assert "4 workers" in message and "can never place them: it has CPU=4, of which this trial holds CPU=1" in message, \
        message[:3000]
    assert "within" not in message, message[:3000]  # not the placement timeout's error
