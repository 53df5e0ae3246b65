"""Distributed XGBoost written for Ray Train 2.x (its documented API, no Ray Data).
tests/test_ray_train_compat.py migrates it with `trainkit migrate` and runs it on trainkit."""

import xgboost
from sklearn.datasets import load_breast_cancer

import ray.train
from ray.train import RunConfig, ScalingConfig
from ray.train.xgboost import RayTrainReportCallback, XGBoostTrainer


def train_fn_per_worker(config: dict):
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    x, y = load_breast_cancer(return_X_y=True)
    dtrain = xgboost.DMatrix(x[rank::world_size], label=y[rank::world_size])
    xgboost.train(config["params"], dtrain, num_boost_round=config["num_boost_round"], evals=[(dtrain, "train")],
                  verbose_eval=False,
                  callbacks=[RayTrainReportCallback(metrics={"loss": "train-logloss"}, frequency=5)])


if __name__ == "__main__":
    trainer = XGBoostTrainer(
        train_fn_per_worker,
        train_loop_config={"num_boost_round": 20,
                           "params": {"objective": "binary:logistic", "eval_metric": "logloss", "max_depth": 3,
                                      "tree_method": "hist", "nthread": 1}},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="xgboost_breast_cancer"),
    )
    result = trainer.fit()
    booster = RayTrainReportCallback.get_model(result.checkpoint)
    print("metrics:", result.metrics)
    print("rounds:", booster.num_boosted_rounds())
    assert booster.num_boosted_rounds() == 20 and "loss" in result.metrics, result.metrics
    assert len(result.best_checkpoints) == 4  # rounds 5, 10, 15, 20
