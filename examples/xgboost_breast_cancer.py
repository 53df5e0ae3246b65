"""Distributed XGBoost on scikit-learn's bundled breast-cancer data, 2 CPU workers.

Each worker holds half of the training rows (``trainkit.shard``); XGBoost's collective builds every
tree from both halves, so the two workers end with one model. Every 10 rounds a checkpoint is
committed; at the end the model is loaded from the last one and scored on held-out rows.

    python examples/xgboost_breast_cancer.py
"""

from __future__ import annotations

import xgboost
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

import trainkit
from trainkit_xgboost import ReportCallback, XGBoostTrainer


def split(part: str):
    x, y = load_breast_cancer(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    return (x_train, y_train) if part == "train" else (x_test, y_test)


def train_fn(config: dict) -> None:
    x, y = split("train")
    dtrain = xgboost.DMatrix(trainkit.shard(x), label=trainkit.shard(y))
    booster, done = None, 0
    if checkpoint := trainkit.get_checkpoint():  # a restarted attempt continues where it stopped
        booster = ReportCallback.get_model(checkpoint)
        done = booster.num_boosted_rounds()
    xgboost.train(config["params"], dtrain, num_boost_round=config["rounds"] - done, xgb_model=booster,
                  evals=[(dtrain, "train")], verbose_eval=False,
                  callbacks=[ReportCallback(metrics={"logloss": "train-logloss", "error": "train-error"},
                                            frequency=10)])


def main() -> None:
    params = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "tree_method": "hist",
              "max_depth": 3, "eta": 0.3, "nthread": 1}
    trainer = XGBoostTrainer(
        train_fn,
        train_loop_config={"params": params, "rounds": 40},
        scaling_config=trainkit.ScalingConfig(num_workers=2),
        run_config=trainkit.RunConfig(failure_config=trainkit.FailureConfig(max_failures=2)),
    )
    result = trainer.fit()
    booster = ReportCallback.get_model(result.checkpoint)
    x_test, y_test = split("test")
    accuracy = ((booster.predict(xgboost.DMatrix(x_test)) > 0.5) == y_test).mean()
    print(f"rounds: {booster.num_boosted_rounds()}, final train logloss: {result.metrics['logloss']:.4f}")
    print(f"held-out test accuracy: {accuracy:.3f}")


if __name__ == "__main__":
    main()
