"""LightGBMTrainer on 2 real workers with scikit-learn's breast-cancer data."""

import os

import lightgbm
import pytest
from sklearn.datasets import load_breast_cancer

import trainkit
from trainkit import FailureConfig, ScalingConfig
from trainkit_lightgbm import LightGBMConfig, LightGBMTrainer, ReportCallback, get_network_params

X, Y = load_breast_cancer(return_X_y=True)
PARAMS = {"objective": "binary", "metric": ["binary_logloss", "binary_error"], "tree_learner": "data",
          "pre_partition": True, "num_leaves": 8, "num_threads": 1, "deterministic": True, "force_row_wise": True,
          "seed": 0, "verbose": -1}


def trees(booster):
    return booster.dump_model()["tree_info"]


def train_fn(config):
    x, y = trainkit.shard(X), trainkit.shard(Y)
    checkpoint = trainkit.get_checkpoint()
    booster = ReportCallback.get_model(checkpoint) if checkpoint else None
    start = booster.current_iteration() if booster else 0
    if config.get("fail_at") and trainkit.get_context().get_world_rank() == 1 and not os.path.exists(config["marker"]):
        def fail(env):
            if env.iteration + 1 == config["fail_at"]:
                open(config["marker"], "w").close()
                raise RuntimeError("injected failure")
        extra = [fail]
    else:
        extra = []
    train = lightgbm.Dataset(x, label=y)
    booster = lightgbm.train({**PARAMS, **get_network_params()}, train, num_boost_round=config["rounds"] - start,
                             valid_sets=[train], valid_names=["train"], init_model=booster,
                             callbacks=[ReportCallback(frequency=config["frequency"]), *extra])
    trainkit.report({"trees": str(trees(booster)), "started_at": start,
                     "prediction_sum": float(booster.predict(X).sum())})


class Collect(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        self.metrics = metrics


def fit(run_config, collect=None, **config):
    config = {"rounds": 10, "frequency": 5, **config}
    return LightGBMTrainer(train_fn, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                           run_config=run_config(callbacks=[collect] if collect else [],
                                                 failure_config=FailureConfig(max_failures=1))).fit()


def test_two_workers_train_one_model_from_both_shards(ray_cluster, run_config):
    collect = Collect()
    result = fit(run_config, collect)
    r0, r1 = collect.metrics
    assert r0["trees"] == r1["trees"]  # identical trees on both ranks
    alone = {k: v for k, v in PARAMS.items() if k not in ("tree_learner", "pre_partition")}
    local = lightgbm.train(alone, lightgbm.Dataset(X[: len(X) // 2], label=Y[: len(Y) // 2]), 10)
    assert str(trees(local)) != r0["trees"]  # not a rank-local model

    booster = ReportCallback.get_model(result.checkpoint)  # reloads and predicts the same
    assert booster.current_iteration() == 10
    assert float(booster.predict(X).sum()) == pytest.approx(r0["prediction_sum"], rel=1e-9)
    assert ((booster.predict(X) > 0.5) == Y).mean() > 0.95

    frame = result.metrics_dataframe
    assert list(frame["iteration"].iloc[:10]) == list(range(1, 11))
    assert frame["train-binary_logloss"].iloc[9] < frame["train-binary_logloss"].iloc[0]
    assert [m["iteration"] for _, m in result.best_checkpoints] == [5, 10]


def test_resumes_from_the_last_checkpoint_after_a_failure(ray_cluster, run_config, tmp_path):
    collect = Collect()
    result = fit(run_config, collect, fail_at=7, marker=str(tmp_path / "failed"))
    assert os.path.exists(tmp_path / "failed")
    assert collect.metrics[0]["started_at"] == 5
    assert ReportCallback.get_model(result.checkpoint).current_iteration() == 10
    assert collect.metrics[0]["trees"] == collect.metrics[1]["trees"]


def test_local_mode_trains_alone(run_config):
    result = LightGBMTrainer(train_fn, train_loop_config={"rounds": 3, "frequency": 0},
                             scaling_config=ScalingConfig(num_workers=0), run_config=run_config()).fit()
    assert ReportCallback.get_model(result.checkpoint).current_iteration() == 3


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="timeout_s=0"):
        LightGBMConfig(timeout_s=0)
    with pytest.raises(ValueError, match="metrics="):
        ReportCallback(metrics=3)
    with pytest.raises(ValueError, match="frequency=1.5"):
        ReportCallback(frequency=1.5)
    with pytest.raises(TypeError, match="lightgbm_config must be a LightGBMConfig"):
        LightGBMTrainer(train_fn, lightgbm_config={})


def test_ray_data_style_arrow_frame_trains_after_normalizing(run_config):
    """Ray's LightGBM guide: an Arrow-backed frame (``Dataset.to_pandas()``) goes through
    ``normalize_pandas_for_lightgbm`` into ``lightgbm.Dataset``; the model file is ``CHECKPOINT_NAME``."""
    import pandas as pd

    from trainkit_lightgbm import normalize_pandas_for_lightgbm

    frame = pd.DataFrame({"a": X[:, 0], "b": (X[:, 1] * 10).astype("int64"), "flag": X[:, 2] > X[:, 2].mean(),
                          "y": Y}).convert_dtypes(dtype_backend="pyarrow")

    def fn():
        data = normalize_pandas_for_lightgbm(frame)
        assert [str(t) for t in data.dtypes] == ["Float64", "Int64", "boolean", "Int64"]
        train = lightgbm.Dataset(data.drop(columns="y"), label=data["y"])
        lightgbm.train({**PARAMS, "tree_learner": "serial"}, train, num_boost_round=3, valid_sets=[train],
                       valid_names=["train"], callbacks=[ReportCallback()])

    result = LightGBMTrainer(fn, scaling_config=ScalingConfig(num_workers=0), run_config=run_config()).fit()
    assert ReportCallback.CHECKPOINT_NAME in os.listdir(result.checkpoint.path)
    assert ReportCallback.get_model(result.checkpoint).current_iteration() == 3
