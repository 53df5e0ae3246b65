"""LightGBM through Ray Train V2's module paths (ray.train.v2.lightgbm.lightgbm_trainer), with the checkpoint read
back through ray.train.lightgbm.RayTrainReportCallback and get_network_params per worker."""

import lightgbm
import numpy as np
from sklearn.datasets import make_classification

from ray.train import CheckpointConfig, RunConfig, ScalingConfig
from ray.train.lightgbm import RayTrainReportCallback, get_network_params
from ray.train.v2.lightgbm.lightgbm_trainer import LightGBMTrainer

import ray.train


def train_fn_per_worker(config):
    rank, size = ray.train.get_context().get_world_rank(), ray.train.get_context().get_world_size()
    x, y = make_classification(n_samples=400, n_features=8, random_state=0)
    train_set = lightgbm.Dataset(x[rank::size], label=y[rank::size])
    params = {"objective": "binary", "metric": "binary_error", "tree_learner": "data", "pre_partition": True,
              "num_leaves": 8, "num_threads": 1, "verbose": -1, **get_network_params()}
    lightgbm.train(params, train_set, num_boost_round=6, valid_sets=[train_set], valid_names=["train"],
                   callbacks=[RayTrainReportCallback(frequency=2)])


if __name__ == "__main__":
    result = LightGBMTrainer(
        train_fn_per_worker,
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="lightgbm_v2_paths", checkpoint_config=CheckpointConfig(num_to_keep=1)),
    ).fit()
    booster = RayTrainReportCallback.get_model(result.checkpoint)
    x, y = make_classification(n_samples=400, n_features=8, random_state=0)
    accuracy = float(np.mean((booster.predict(x) > 0.5) == y))
    assert booster.current_iteration() == 6 and accuracy > 0.8, accuracy
    assert len(result.best_checkpoints) == 1
    print("accuracy:", accuracy)
