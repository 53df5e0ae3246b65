"""Distributed LightGBM written for Ray Train 2.x (its documented API, no Ray Data).
tests/test_ray_train_compat.py migrates it with `trainkit migrate` and runs it on trainkit."""

import lightgbm
from sklearn.datasets import load_breast_cancer

import ray.train
from ray.train import RunConfig, ScalingConfig
from ray.train.lightgbm import LightGBMTrainer, RayTrainReportCallback, get_network_params


def train_fn_per_worker(config: dict):
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    x, y = load_breast_cancer(return_X_y=True)
    train_set = lightgbm.Dataset(x[rank::world_size], label=y[rank::world_size])
    params = {**config["params"], **get_network_params()}
    lightgbm.train(params, train_set, num_boost_round=config["num_boost_round"], valid_sets=[train_set],
                   valid_names=["train"],
                   callbacks=[RayTrainReportCallback(metrics={"loss": "train-binary_logloss"}, frequency=5)])


if __name__ == "__main__":
    trainer = LightGBMTrainer(
        train_fn_per_worker,
        train_loop_config={"num_boost_round": 20,
                           "params": {"objective": "binary", "metric": "binary_logloss", "tree_learner": "data",
                                      "pre_partition": True, "num_leaves": 8, "num_threads": 1, "verbose": -1}},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="lightgbm_breast_cancer"),
    )
    result = trainer.fit()
    booster = RayTrainReportCallback.get_model(result.checkpoint)
    print("metrics:", result.metrics)
    print("rounds:", booster.current_iteration())
    assert booster.current_iteration() == 20 and "loss" in result.metrics, result.metrics
    assert len(result.best_checkpoints) == 4  # rounds 5, 10, 15, 20
