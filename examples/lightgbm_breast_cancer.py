"""Distributed LightGBM on scikit-learn's bundled breast-cancer data, 2 CPU workers.

Each worker holds half of the training rows (``trainkit.shard``); with ``get_network_params()``
LightGBM's data-parallel learner builds every tree from both halves. Every 10 rounds a checkpoint
is committed; at the end the model is loaded from the last one and scored on held-out rows.

    python examples/lightgbm_breast_cancer.py
"""

from __future__ import annotations

import lightgbm
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

import trainkit
from trainkit_lightgbm import LightGBMTrainer, ReportCallback, get_network_params


def split(part: str):
    x, y = load_breast_cancer(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return (x_train, y_train) if part == "train" else (x_test, y_test)


def train_fn(config: dict) -> None:
    x, y = split("train")
    train_set = lightgbm.Dataset(trainkit.shard(x), label=trainkit.shard(y))
    booster, done = None, 0
    if checkpoint := trainkit.get_checkpoint():  # a restarted attempt continues where it stopped
        booster = ReportCallback.get_model(checkpoint)
        done = booster.current_iteration()
    lightgbm.train({**config["params"], **get_network_params()}, train_set, num_boost_round=config["rounds"] - done,
                   init_model=booster, valid_sets=[train_set], valid_names=["train"],
                   callbacks=[ReportCallback(metrics={"logloss": "train-binary_logloss", "error": "train-binary_error"},
                                             frequency=10)])


def main() -> None:
    params = {"objective": "binary", "metric": ["binary_logloss", "binary_error"], "tree_learner": "data",
              "pre_partition": True, "num_leaves": 15, "learning_rate": 0.1, "num_threads": 1, "verbose": -1}
    trainer = LightGBMTrainer(
        train_fn,
        train_loop_config={"params": params, "rounds": 40},
        scaling_config=trainkit.ScalingConfig(num_workers=2),
        run_config=trainkit.RunConfig(failure_config=trainkit.FailureConfig(max_failures=2)),
    )
    result = trainer.fit()
    booster = ReportCallback.get_model(result.checkpoint)
    x_test, y_test = split("test")
    accuracy = ((booster.predict(x_test) > 0.5) == y_test).mean()
    print(f"rounds: {booster.current_iteration()}, final train logloss: {result.metrics['logloss']:.4f}")
    print(f"held-out test accuracy: {accuracy:.3f}")


if __name__ == "__main__":
    main()
