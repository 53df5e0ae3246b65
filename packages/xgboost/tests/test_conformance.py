"""trainkit-xgboost against trainkit.testing's conformance suites."""

import numpy as np
import xgboost
from xgboost import collective

from trainkit.testing import BackendConformance, CheckpointConformance
from trainkit_xgboost import XGBoostCheckpointIO, XGBoostConfig


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


class TestXGBoostBackend(BackendConformance):
    backend_config = XGBoostConfig()
    framework_modules = ("xgboost",)
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)


class TestXGBoostCheckpointIO(CheckpointConformance):
    checkpoint_io = XGBoostCheckpointIO()

    def make_state(self, seed):
        x = np.arange(40.0).reshape(20, 2)
        return xgboost.train({"max_depth": 2, "nthread": 1}, xgboost.DMatrix(x, label=x[:, 0] > 20), 3 + seed)

    def assert_same(self, loaded, saved):
        assert loaded.save_raw("json") == saved.save_raw("json")
