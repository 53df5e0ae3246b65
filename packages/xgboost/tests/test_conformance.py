"""trainkit-xgboost against trainkit.testing's conformance suites."""

import numpy as np
import xgboost
from xgboost import collective

import trainkit
from trainkit.testing import BackendConformance, CheckpointConformance
from trainkit_xgboost import ReportCallback, XGBoostCheckpointIO, XGBoostConfig


def framework_rank() -> int:
    return collective.get_rank()


def all_gather(value: float) -> list[float]:
    slots = np.zeros(collective.get_world_size())  # each rank fills its own slot of a sum
    slots[collective.get_rank()] = value
    return [float(v) for v in collective.allreduce(slots, collective.Op.SUM)]


def is_initialized() -> bool:
    """XGBoost's communicator lives in the training thread; what would outlive it is the backend's
    part: the communicator's arguments a next training function joins with, and rank 0's tracker."""
    from trainkit_xgboost import backend

    return backend._communicator_args is not None or backend._tracker is not None


def report_callback(metrics: dict) -> None:
    """A round's end as xgboost.train calls ReportCallback: its evaluation log holds ``metrics``."""
    model = xgboost.train({"nthread": 1}, xgboost.DMatrix(np.zeros((2, 1)), label=np.array([0.0, 1.0])), 1)
    ReportCallback(checkpoint_at_end=False).after_iteration(
        model, 0, {"train": {name: [value] for name, value in metrics.items()}})


def journey(config: dict) -> None:
    """A user's run (the package docstring's): this rank's rows by trainkit.shard, xgboost.train with
    ReportCallback checkpointing every round, resumed from its model (ReportCallback.get_model)."""
    import trainkit

    n = len(config["rows"])
    x = (trainkit.shard(np.array(config["rows"], dtype=float)) + 1).reshape(-1, 1) / n
    checkpoint = trainkit.get_checkpoint()
    model = ReportCallback.get_model(checkpoint) if checkpoint is not None else None
    done = model.num_boosted_rounds() if model is not None else 0
    data = xgboost.DMatrix(x, label=3 * x[:, 0] + 1)
    params = {"max_depth": 2, "nthread": 1, "eta": 0.3 + 0.1 * config["seed"], "base_score": 0.5}
    xgboost.train(params, data, num_boost_round=config["steps"] - done, xgb_model=model, evals=[(data, "train")],
                  verbose_eval=False, callbacks=[ReportCallback(metrics={"loss": "train-rmse"}, frequency=1)])


class TestXGBoostBackend(BackendConformance):
    backend_config = XGBoostConfig()
    framework_modules = ("xgboost",)
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
    report_callback = staticmethod(report_callback)
    shard = staticmethod(trainkit.shard)  # what the plugin's docs have users split their rows with
    journey = staticmethod(journey)


class TestXGBoostCheckpointIO(CheckpointConformance):
    checkpoint_io = XGBoostCheckpointIO()
    resume = staticmethod(ReportCallback.get_model)  # the model in the checkpoint given

    def make_state(self, seed):
        x = np.arange(40.0).reshape(20, 2)
        return xgboost.train({"max_depth": 2, "nthread": 1}, xgboost.DMatrix(x, label=x[:, 0] > 20), 3 + seed)

    def assert_same(self, loaded, saved):
        assert loaded.save_raw("json") == saved.save_raw("json")
