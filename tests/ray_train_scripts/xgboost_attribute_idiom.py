"""`import ray.train.xgboost` then attribute access, ray.train.xgboost.XGBoostConfig, a callback
checkpoint at the end only, and the model read back with RayTrainReportCallback.get_model."""

import xgboost
from sklearn.datasets import load_diabetes

import ray.train
import ray.train.xgboost


def train_fn_per_worker(config):
    context = ray.train.get_context()
    x, y = load_diabetes(return_X_y=True)
    rows = slice(context.get_world_rank(), None, context.get_world_size())
    dtrain = xgboost.DMatrix(x[rows], label=y[rows])
    xgboost.train({"objective": "reg:squarederror", "eval_metric": "rmse", "max_depth": 2, "nthread": 1}, dtrain,
                  num_boost_round=8, evals=[(dtrain, "train")], verbose_eval=False,
                  callbacks=[ray.train.xgboost.RayTrainReportCallback(frequency=0, checkpoint_at_end=True)])


if __name__ == "__main__":
    trainer = ray.train.xgboost.XGBoostTrainer(
        train_fn_per_worker,
        xgboost_config=ray.train.xgboost.XGBoostConfig(),
        scaling_config=ray.train.ScalingConfig(num_workers=2),
        run_config=ray.train.RunConfig(name="xgboost_attribute_idiom"),
    )
    result = trainer.fit()
    booster = ray.train.xgboost.RayTrainReportCallback.get_model(result.checkpoint)
    assert booster.num_boosted_rounds() == 8 and "train-rmse" in result.metrics, result.metrics
    print("rmse:", result.metrics["train-rmse"])
