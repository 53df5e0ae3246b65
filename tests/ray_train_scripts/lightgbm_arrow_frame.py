"""LightGBM written for Ray Train 2.x: an Arrow-backed pandas frame (what Ray Data's to_pandas()
returns) normalized with normalize_pandas_for_lightgbm, the model read back by CHECKPOINT_NAME.
tests/test_ray_train_compat.py migrates it with the rewrite table and runs it on trainkit."""

import os

import lightgbm
import pandas as pd
from sklearn.datasets import load_breast_cancer

import ray.train
from ray.train import RunConfig, ScalingConfig
from ray.train.lightgbm import (
    LightGBMTrainer,
    RayTrainReportCallback,
    get_network_params,
    normalize_pandas_for_lightgbm,
)


def train_fn_per_worker(config: dict):
    context = ray.train.get_context()
    rank, world_size = context.get_world_rank(), context.get_world_size()
    data = load_breast_cancer(as_frame=True).frame.convert_dtypes(dtype_backend="pyarrow")
    shard = normalize_pandas_for_lightgbm(data.iloc[rank::world_size])
    train_set = lightgbm.Dataset(shard.drop(columns="target"), label=shard["target"])
    lightgbm.train({**config["params"], **get_network_params()}, train_set, num_boost_round=10,
                   valid_sets=[train_set], valid_names=["train"],
                   callbacks=[RayTrainReportCallback(metrics={"loss": "train-binary_logloss"})])


if __name__ == "__main__":
    trainer = LightGBMTrainer(
        train_fn_per_worker,
        train_loop_config={"params": {"objective": "binary", "metric": "binary_logloss", "tree_learner": "data",
                                      "pre_partition": True, "num_leaves": 8, "num_threads": 1, "verbose": -1}},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="lightgbm_arrow_frame"),
    )
    result = trainer.fit()
    with result.checkpoint.as_directory() as checkpoint_dir:
        booster = lightgbm.Booster(model_file=os.path.join(checkpoint_dir, RayTrainReportCallback.CHECKPOINT_NAME))
    x, y = load_breast_cancer(return_X_y=True)
    accuracy = ((booster.predict(pd.DataFrame(x)) > 0.5) == y).mean()
    print("metrics:", result.metrics, "accuracy:", accuracy)
    assert booster.current_iteration() == 10 and accuracy > 0.9, accuracy
    assert RayTrainReportCallback.get_model(result.checkpoint).current_iteration() == 10
