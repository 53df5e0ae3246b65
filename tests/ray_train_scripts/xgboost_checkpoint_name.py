"""Distributed XGBoost written for Ray Train 2.x: the model file read back by
RayTrainReportCallback.CHECKPOINT_NAME and by get_model; worker failures caught as WorkerGroupError.
tests/test_ray_train_compat.py migrates it with the rewrite table and runs it on trainkit."""

import os

import numpy as np
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
    xgboost.train(config["params"], dtrain, num_boost_round=10, evals=[(dtrain, "train")],
                  callbacks=[RayTrainReportCallback(metrics={"loss": "train-logloss"})])


if __name__ == "__main__":
    trainer = XGBoostTrainer(
        train_fn_per_worker,
        train_loop_config={"params": {"objective": "binary:logistic", "eval_metric": "logloss", "max_depth": 3,
                                      "nthread": 1}},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="xgboost_checkpoint_name"),
    )
    try:
        result = trainer.fit()
    except ray.train.WorkerGroupError as error:
        raise SystemExit(f"workers failed: {error.worker_failures}")
    booster = xgboost.Booster()
    with result.checkpoint.as_directory() as checkpoint_dir:
        booster.load_model(os.path.join(checkpoint_dir, RayTrainReportCallback.CHECKPOINT_NAME))
    x, y = load_breast_cancer(return_X_y=True)
    accuracy = float(np.mean((booster.predict(xgboost.DMatrix(x)) > 0.5) == y))
    print("metrics:", result.metrics, "accuracy:", accuracy)
    assert booster.num_boosted_rounds() == 10 and accuracy > 0.9, accuracy
    assert RayTrainReportCallback.get_model(result.checkpoint).num_boosted_rounds() == 10
