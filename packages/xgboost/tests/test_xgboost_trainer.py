"""XGBoostTrainer on 2 real workers with scikit-learn's breast-cancer data."""

import hashlib
import os

import pytest
import xgboost
from sklearn.datasets import load_breast_cancer

import trainkit
from trainkit import FailureConfig, ScalingConfig
from trainkit_xgboost import ReportCallback, XGBoostConfig, XGBoostTrainer

X, Y = load_breast_cancer(return_X_y=True)
PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "tree_method": "hist",
          "max_depth": 3, "nthread": 1, "seed": 0}


def train_fn(config):
    x, y = trainkit.shard(X), trainkit.shard(Y)
    rounds, start = config["rounds"], None
    checkpoint = trainkit.get_checkpoint()
    booster = ReportCallback.get_model(checkpoint) if checkpoint else None
    start = booster.num_boosted_rounds() if booster else 0
    dtrain = xgboost.DMatrix(x, label=y)
    callbacks = [ReportCallback(frequency=config["frequency"])]
    if config.get("fail_at") and not os.path.exists(config["marker"]):
        callbacks.append(FailOnce(config["fail_at"], config["marker"]))
    booster = xgboost.train(PARAMS, dtrain, num_boost_round=rounds - start, evals=[(dtrain, "train")],
                            xgb_model=booster, callbacks=callbacks, verbose_eval=False)
    trainkit.report({"model_sha": hashlib.sha256(booster.save_raw("json")).hexdigest(), "started_at": start,
                     "prediction_sum": float(booster.predict(xgboost.DMatrix(X)).sum())})


class FailOnce(xgboost.callback.TrainingCallback):
    def __init__(self, round_, marker):
        self.round, self.marker = round_, marker

    def after_iteration(self, model, epoch, evals_log):
        if model.num_boosted_rounds() == self.round and trainkit.get_context().get_world_rank() == 1:
            open(self.marker, "w").close()
            raise RuntimeError("injected failure")
        return False


class Collect(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        self.metrics = metrics


def fit(run_config, collect=None, **config):
    config = {"rounds": 10, "frequency": 5, **config}
    return XGBoostTrainer(train_fn, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                          run_config=run_config(callbacks=[collect] if collect else [],
                                                failure_config=FailureConfig(max_failures=1))).fit()


def test_two_workers_train_one_model_from_both_shards(ray_cluster, run_config):
    collect = Collect()
    result = fit(run_config, collect)
    r0, r1 = collect.metrics
    assert r0["model_sha"] == r1["model_sha"]  # identical boosters on both ranks
    local = xgboost.train(PARAMS, xgboost.DMatrix(X[: len(X) // 2], label=Y[: len(Y) // 2]), 10)
    assert hashlib.sha256(local.save_raw("json")).hexdigest() != r0["model_sha"]  # not a rank-local model

    booster = ReportCallback.get_model(result.checkpoint)  # reloads and predicts the same
    assert booster.num_boosted_rounds() == 10
    assert float(booster.predict(xgboost.DMatrix(X)).sum()) == r0["prediction_sum"]
    accuracy = ((booster.predict(xgboost.DMatrix(X)) > 0.5) == Y).mean()
    assert accuracy > 0.95

    frame = result.metrics_dataframe  # one report per round, plus the final one of train_fn
    assert list(frame["iteration"].iloc[:10]) == list(range(1, 11))
    assert frame["train-logloss"].iloc[9] < frame["train-logloss"].iloc[0]
    assert [m["iteration"] for _, m in result.best_checkpoints] == [5, 10]


def test_resumes_from_the_last_checkpoint_after_a_failure(ray_cluster, run_config, tmp_path):
    collect = Collect()
    result = fit(run_config, collect, fail_at=7, marker=str(tmp_path / "failed"))
    assert os.path.exists(tmp_path / "failed")
    assert collect.metrics[0]["started_at"] == 5  # the checkpoint of round 5, not a fresh start
    assert ReportCallback.get_model(result.checkpoint).num_boosted_rounds() == 10
    assert collect.metrics[0]["model_sha"] == collect.metrics[1]["model_sha"]


def test_local_mode_trains_alone(run_config):
    result = XGBoostTrainer(train_fn, train_loop_config={"rounds": 3, "frequency": 0},
                            scaling_config=ScalingConfig(num_workers=0), run_config=run_config()).fit()
    assert ReportCallback.get_model(result.checkpoint).num_boosted_rounds() == 3
    # Ray Train's idiom: the model file by the callback's CHECKPOINT_NAME
    assert os.path.isfile(os.path.join(result.checkpoint.path, ReportCallback.CHECKPOINT_NAME))


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="timeout_s=0"):
        XGBoostConfig(timeout_s=0)
    with pytest.raises(ValueError, match="frequency=-1"):
        ReportCallback(frequency=-1)
    with pytest.raises(TypeError, match="xgboost_config must be an XGBoostConfig"):
        XGBoostTrainer(train_fn, xgboost_config={"timeout_s": 1})


def test_unknown_metric_names_what_xgboost_reported(run_config):
    def fn():
        d = xgboost.DMatrix(X, label=Y)
        xgboost.train(PARAMS, d, 1, evals=[(d, "train")], callbacks=[ReportCallback(metrics="eval-auc")])

    with pytest.raises(trainkit.TrainingFailedError, match="train-logloss"):
        XGBoostTrainer(fn, scaling_config=ScalingConfig(num_workers=0), run_config=run_config()).fit()


def test_checkpoint_rounds_count_the_rounds_of_a_continued_model(run_config):
    rc = run_config()
    local = ScalingConfig(num_workers=0)
    XGBoostTrainer(train_fn, train_loop_config={"rounds": 3, "frequency": 0}, scaling_config=local, run_config=rc).fit()
    resumed = XGBoostTrainer(train_fn, train_loop_config={"rounds": 10, "frequency": 5}, scaling_config=local,
                             run_config=run_config(name=rc.name, storage_path=rc.storage_path)).fit()
    assert [m["iteration"] for _, m in resumed.best_checkpoints] == [3, 5, 10]  # not 8 and 13
