"""trainkit-toyfw: the plugin of toyfw, as a third party writes it, and the mistakes the
conformance suite must catch: ranks reversed against trainkit's (``toy_reversed``), a teardown that
does nothing (``toy_no_teardown``), a registered Trainer that forgets its default config
(``toy_broken_trainer``), one that drops the user's config (``toy_drops_config``), and a checkpoint
helper that reports a checkpoint from every rank (``EveryRankCheckpointIO``). Imports no framework; the backend
imports toyfw on the workers."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from typing import ClassVar

import trainkit
from trainkit import Backend, BackendConfig, DataParallelTrainer, hookimpl

FRAMEWORK = "trainkit-toyfw"  # toyfw comes with this distribution


def _join(reverse_ranks: bool) -> None:
    import toyfw

    ctx = trainkit.get_context()
    rank = ctx.get_world_rank()
    toyfw.init(ctx.get_world_size() - 1 - rank if reverse_ranks else rank)


def _leave() -> None:
    import toyfw

    toyfw.shutdown()


class ToyBackend(Backend):
    def on_start(self, worker_group, backend_config: ToyConfig) -> None:
        worker_group.execute(_join, backend_config.reverse_ranks)

    def on_shutdown(self, worker_group, backend_config: ToyConfig) -> None:
        if backend_config.tears_down:
            worker_group.execute(_leave)

    def on_local_start(self, backend_config: ToyConfig) -> None:
        import toyfw

        os.environ["TOYFW_LOCAL"] = "1"
        toyfw.init(0)

    def on_local_shutdown(self, backend_config: ToyConfig) -> None:
        if backend_config.tears_down:
            os.environ.pop("TOYFW_LOCAL")
            _leave()


@dataclass
class ToyConfig(BackendConfig):
    reverse_ranks: ClassVar[bool] = False
    tears_down: ClassVar[bool] = True

    @property
    def backend_cls(self):
        return ToyBackend


class ReversedRanksConfig(ToyConfig):
    reverse_ranks = True


class NoTeardownConfig(ToyConfig):
    tears_down = False


class BrokenTrainerConfig(ToyConfig):
    pass


class ToyTrainer(DataParallelTrainer):
    def __init__(self, train_loop_per_worker, **kwargs):
        kwargs.setdefault("backend_config", ToyConfig())
        super().__init__(train_loop_per_worker, **kwargs)


class BrokenTrainer(DataParallelTrainer):
    def __init__(self, train_loop_per_worker, **kwargs):
        super().__init__(train_loop_per_worker, **kwargs)  # forgot: kwargs.setdefault("backend_config", ...)


class DropsConfigConfig(ToyConfig):
    pass


class DropsConfigTrainer(DataParallelTrainer):
    def __init__(self, train_loop_per_worker, **kwargs):
        kwargs["backend_config"] = DropsConfigConfig()  # meant setdefault: the user's config is lost
        super().__init__(train_loop_per_worker, **kwargs)


class ToyCheckpointIO(trainkit.CheckpointIO):
    def save(self, state, directory):
        with open(os.path.join(directory, "state.json"), "w") as f:
            json.dump(state, f)

    def load_from_directory(self, directory):
        with open(os.path.join(directory, "state.json")) as f:
            return json.load(f)


class EveryRankCheckpointIO(ToyCheckpointIO):
    def report(self, metrics, state):  # forgot: only rank 0 saves
        with tempfile.TemporaryDirectory() as tmp:
            self.save(state, tmp)
            trainkit.report(metrics, checkpoint=trainkit.Checkpoint.from_directory(tmp))


@hookimpl
def trainkit_register_backends(registry) -> None:
    registry.register("toy", ToyConfig, ToyTrainer)
    registry.register("toy_reversed", ReversedRanksConfig)
    registry.register("toy_no_teardown", NoTeardownConfig)
    registry.register("toy_broken_trainer", BrokenTrainerConfig, BrokenTrainer)
    registry.register("toy_drops_config", DropsConfigConfig, DropsConfigTrainer)
