"""trainkit-xgboost against trainkit.testing's conformance suites."""

import numpy as np
import xgboost
from xgboost import collective

from trainkit.testing import BackendConformance, CheckpointConformance
from trainkit_xgboost import XGBoostCheckpointIO, XGBoostConfig


def all_reduce_sum(value: float) -> float:
    return float(collective.allreduce(np.array([value]), collective.Op.SUM)[0])


class TestXGBoostBackend(BackendConformance):
    backend_config = XGBoostConfig()
    framework_modules = ("xgboost",)
    all_reduce_sum = staticmethod(all_reduce_sum)


class TestXGBoostCheckpointIO(CheckpointConformance):
    checkpoint_io = XGBoostCheckpointIO()

    def make_state(self):
        x = np.arange(40.0).reshape(20, 2)
        return xgboost.train({"max_depth": 2, "nthread": 1}, xgboost.DMatrix(x, label=x[:, 0] > 20), 3)

    def assert_same(self, loaded, saved):
        assert loaded.save_raw("json") == saved.save_raw("json")
