"""Ray Train 2.x with Ray Tune, as its docs write it: a TorchTrainer fit inside each Tune trial,
reporting to Tune through ray.tune.integration.ray_train.TuneReportCallback."""

import ray.train
import ray.train.torch
from ray import tune
from ray.tune.integration.ray_train import TuneReportCallback


def train_fn_per_worker(config):
    w = 0.0
    for _ in range(3):
        w -= config["lr"] * 2 * (w - 3)  # a gradient step on (w - 3) ** 2
        ray.train.report({"loss": (w - 3) ** 2})


def train_driver_fn(config):
    trainer = ray.train.torch.TorchTrainer(
        train_fn_per_worker,
        train_loop_config=config,
        scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=ray.train.RunConfig(name=f"trial-{tune.get_context().get_trial_id()}",
                                       callbacks=[TuneReportCallback()]),
    )
    trainer.fit()


if __name__ == "__main__":
    tuner = tune.Tuner(
        train_driver_fn,
        param_space={"lr": tune.grid_search([0.4, 0.05])},
        tune_config=tune.TuneConfig(metric="loss", mode="min", max_concurrent_trials=1),
        run_config=tune.RunConfig(name="tune_trainer_per_trial", verbose=0),
    )
    results = tuner.fit()
    best = results.get_best_result()
    assert results.num_errors == 0 and best.config["lr"] == 0.4, best
    assert sorted(r.metrics["training_iteration"] for r in results) == [3, 3]
    print("best lr:", best.config["lr"], "loss:", best.metrics["loss"])
