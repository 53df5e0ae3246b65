"""Run trainkit trainers as Ray Tune trials: reserve each trial's workers, report to Tune.

Needs the ``tune`` extra (``pip install "trainkit-core[tune]"``); Ray Tune is imported when used.

Example::

    from ray import tune
    import trainkit
    from trainkit.tune import TuneReportCallback, trial_resources

    scaling = trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})

    def trial(config):
        trainkit.Trainer(train_fn, backend="torch", train_loop_config=config, scaling_config=scaling,
                         run_config=trainkit.RunConfig(name=tune.get_context().get_trial_name(),
                                                       callbacks=[TuneReportCallback()])).fit()

    tuner = tune.Tuner(tune.with_resources(trial, trial_resources(scaling)),
                       param_space={"lr": tune.loguniform(1e-4, 1e-1)},
                       tune_config=tune.TuneConfig(metric="accuracy", mode="max", num_samples=8))
    results = tuner.fit()
"""

from __future__ import annotations

import warnings
from typing import Any

from trainkit.callbacks import RunContext, UserCallback
from trainkit.checkpoint import Checkpoint
from trainkit.config import ScalingConfig, _bad, _check_number

__all__ = ["TuneReportCallback", "trial_resources"]


def _tune() -> Any:
    """``ray.tune``, once Ray is recent enough for its ``tune.report`` / ``tune.Checkpoint`` API."""
    import ray

    if tuple(int(p) for p in ray.__version__.split(".")[:2]) < (2, 41):
        raise RuntimeError(f"trainkit.tune needs Ray >= 2.41 (ray.tune.report, ray.tune.Checkpoint); this is "
                           f'Ray {ray.__version__}: pip install "trainkit-core[tune]"')
    from ray import tune

    return tune


class TuneReportCallback(UserCallback):
    """Forward every consolidated report to Ray Tune: rank 0's metrics and the committed checkpoint.

    Pass it in the trainer's ``RunConfig(callbacks=[...])`` inside a Tune trial. A checkpoint
    reaches Tune as a ``ray.tune.Checkpoint`` of the committed directory (Tune copies it into the
    trial's storage, so ``ResultGrid`` results carry it).

    Example::

        run_config = trainkit.RunConfig(name=tune.get_context().get_trial_name(),
                                        callbacks=[TuneReportCallback()])
    """

    def __init__(self) -> None:
        tune = _tune()
        with warnings.catch_warnings():  # outside a trial Ray warns and returns None
            warnings.simplefilter("ignore")
            in_trial = tune.get_context().get_trial_name() is not None
        if not in_trial:
            raise RuntimeError("TuneReportCallback reports to a Ray Tune trial: create it inside the function "
                               "that Tune runs (tune.Tuner(trial_fn, ...)), not in the driver script")

    def after_report(self, run_context: RunContext, metrics: list[dict[str, Any]],
                     checkpoint: Checkpoint | None) -> None:
        tune = _tune()
        tune_checkpoint = tune.Checkpoint(checkpoint.path, checkpoint.filesystem) if checkpoint else None
        tune.report(dict(metrics[0]), checkpoint=tune_checkpoint)


def trial_resources(scaling_config: ScalingConfig, trial_cpus: float = 0) -> Any:
    """The ``tune.PlacementGroupFactory`` that reserves a trial: a bundle of ``trial_cpus`` for the
    trial itself (the trainer's driver, which only coordinates; 0 by default) and one bundle per
    worker. The trainer started inside that trial places its workers in the trial's bundles
    instead of asking the cluster again, so Tune starts a trial only when all of its workers fit.

    Example::

        tune.with_resources(trial, trial_resources(trainkit.ScalingConfig(num_workers=2)))
    """
    tune = _tune()
    if not isinstance(scaling_config, ScalingConfig):
        raise TypeError(f"scaling_config must be a trainkit.ScalingConfig, got {type(scaling_config).__name__}")
    if scaling_config.local_mode:
        raise _bad("scaling_config.num_workers", 0, "at least 1 worker: local mode has no workers to reserve")
    if scaling_config.use_tpu or scaling_config.label_selector:
        raise _bad("scaling_config.use_tpu/label_selector", (scaling_config.use_tpu, scaling_config.label_selector),
                   "(False, None): a trial reserves plain bundles")
    if scaling_config.elastic:
        raise _bad("scaling_config.num_workers", scaling_config.num_workers,
                   "a fixed number of workers: a trial reserves its workers up front")
    _check_number("trial_cpus", trial_cpus, minimum=0)
    workers = [dict(scaling_config.worker_resources)] * scaling_config.max_workers
    return tune.PlacementGroupFactory([{"CPU": trial_cpus}, *workers], strategy=scaling_config.placement_strategy)
