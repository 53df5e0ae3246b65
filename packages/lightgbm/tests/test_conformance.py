"""trainkit-lightgbm against trainkit.testing's conformance suites.

LightGBM exposes no collective to Python, so sums go through its own network: every rank trains
one round on a single row labelled ``value``; with ``boost_from_average`` the model starts from
the label mean over all machines, which LightGBM computes with an all-reduce. An all-gather is one
such sum per rank, each rank filling the slot of its LightGBM rank."""

import lightgbm
import numpy as np

import trainkit
from trainkit.testing import BackendConformance, CheckpointConformance
from trainkit_lightgbm import LightGBMCheckpointIO, LightGBMConfig, ReportCallback, get_network_params


def _network_sum(value: float) -> float:
    params = {"objective": "regression", "tree_learner": "data", "pre_partition": True, "boost_from_average": True,
              "min_data_in_leaf": 1, "min_data_in_bin": 1, "learning_rate": 1e-12, "num_threads": 1, "verbose": -1,
              **get_network_params()}
    # an array label: LightGBM < 4.4 cannot take a list under NumPy 2 (np.array(copy=False))
    booster = lightgbm.train(params, lightgbm.Dataset(np.array([[0.0]]), label=np.array([value])), num_boost_round=1)
    mean = float(booster.predict(np.array([[0.0]]))[0])
    return round(mean * params["num_machines"], 6)


def framework_rank() -> int:
    """LightGBM takes its rank from where its own address is in ``machines``."""
    params = get_network_params()
    ports = [machine.rsplit(":", 1)[1] for machine in params["machines"].split(",")]
    return ports.index(str(params["local_listen_port"]))


def all_gather(value: float) -> list[float]:
    rank, size = framework_rank(), trainkit.get_context().get_world_size()
    return [_network_sum(value if slot == rank else 0.0) for slot in range(size)]  # one sum per rank's slot


def is_initialized() -> bool:
    return bool(get_network_params())  # empty once the worker left LightGBM's network


def report_callback(metrics: dict) -> None:
    """A round's end as lightgbm.train calls ReportCallback: its evaluation results hold ``metrics``."""
    from lightgbm.callback import CallbackEnv

    results = [("train", name, value, False) for name, value in metrics.items()]
    ReportCallback(checkpoint_at_end=False)(CallbackEnv(model=None, params={}, iteration=0, begin_iteration=0,
                                                       end_iteration=10, evaluation_result_list=results))


def journey(config: dict) -> None:
    """A user's run: this rank's rows by trainkit.shard, lightgbm.train on the plugin's network with
    ReportCallback checkpointing every round, resumed from its model (ReportCallback.get_model)."""
    n = len(config["rows"])
    x = (trainkit.shard(np.array(config["rows"], dtype=float)) + 1).reshape(-1, 1) / n
    checkpoint = trainkit.get_checkpoint()
    model = ReportCallback.get_model(checkpoint) if checkpoint is not None else None
    done = model.current_iteration() if model is not None else 0
    params = {"objective": "regression", "tree_learner": "data", "pre_partition": True, "min_data_in_leaf": 1,
              "min_data_in_bin": 1, "learning_rate": 0.3 + 0.1 * config["seed"], "num_threads": 1, "verbose": -1,
              **get_network_params()}
    data = lightgbm.Dataset(x, label=3 * x[:, 0] + 1, params={"verbose": -1})
    lightgbm.train(params, data, num_boost_round=config["steps"] - done, init_model=model, valid_sets=[data],
                   valid_names=["train"], callbacks=[ReportCallback(metrics={"loss": "train-l2"}, frequency=1)])


class TestLightGBMBackend(BackendConformance):
    backend_config = LightGBMConfig()
    # LightGBM finds itself in the machine list by its interfaces' addresses: 127.0.0.2 is on none
    # ("Machine list file doesn't contain the local machine"), so two simulated nodes cannot host it
    simulated_nodes = False
    framework_modules = ("lightgbm",)
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
    report_callback = staticmethod(report_callback)
    shard = staticmethod(trainkit.shard)  # what the plugin's docs have users split their rows with
    journey = staticmethod(journey)


class TestLightGBMCheckpointIO(CheckpointConformance):
    checkpoint_io = LightGBMCheckpointIO()
    resume = staticmethod(ReportCallback.get_model)  # the model in the checkpoint given

    def make_state(self, seed):
        x = np.arange(40.0).reshape(20, 2)
        data = lightgbm.Dataset(x, label=x[:, 0] > 20, params={"verbose": -1})
        return lightgbm.train({"objective": "binary", "num_threads": 1, "min_data_in_leaf": 2, "verbose": -1}, data, 3 + seed)

    def assert_same(self, loaded, saved):
        assert loaded.dump_model()["tree_info"] == saved.dump_model()["tree_info"]
