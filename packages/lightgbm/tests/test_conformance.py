"""trainkit-lightgbm against trainkit.testing's conformance suites.

LightGBM exposes no collective to Python, so the sum goes through its own network: every rank
trains one round on a single row labelled ``value``; with ``boost_from_average`` the model starts
from the label mean over all machines, which LightGBM computes with an all-reduce."""

import lightgbm
import numpy as np

from trainkit.testing import BackendConformance, CheckpointConformance
from trainkit_lightgbm import LightGBMCheckpointIO, LightGBMConfig, get_network_params


def all_reduce_sum(value: float) -> float:
    params = {"objective": "regression", "tree_learner": "data", "pre_partition": True, "boost_from_average": True,
              "min_data_in_leaf": 1, "min_data_in_bin": 1, "learning_rate": 1e-12, "num_threads": 1, "verbose": -1,
              **get_network_params()}
    # an array label: LightGBM < 4.4 cannot take a list under NumPy 2 (np.array(copy=False))
    booster = lightgbm.train(params, lightgbm.Dataset(np.array([[0.0]]), label=np.array([value])), num_boost_round=1)
    mean = float(booster.predict(np.array([[0.0]]))[0])
    return round(mean * params["num_machines"], 6)


class TestLightGBMBackend(BackendConformance):
    backend_config = LightGBMConfig()
    framework_modules = ("lightgbm",)
    all_reduce_sum = staticmethod(all_reduce_sum)


class TestLightGBMCheckpointIO(CheckpointConformance):
    checkpoint_io = LightGBMCheckpointIO()

    def make_state(self):
        x = np.arange(40.0).reshape(20, 2)
        data = lightgbm.Dataset(x, label=x[:, 0] > 20, params={"verbose": -1})
        return lightgbm.train({"objective": "binary", "num_threads": 1, "min_data_in_leaf": 2, "verbose": -1}, data, 3)

    def assert_same(self, loaded, saved):
        assert loaded.dump_model()["tree_info"] == saved.dump_model()["tree_info"]
