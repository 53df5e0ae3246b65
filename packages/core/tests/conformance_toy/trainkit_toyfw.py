"""trainkit-toyfw: the plugin of toyfw, as a third party writes it, and the mistakes the
conformance suite must catch: ranks reversed against trainkit's (``toy_reversed``), a teardown that
does nothing (``toy_no_teardown``), a registered Trainer that forgets its default config
(``toy_broken_trainer``), one that drops the user's config (``toy_drops_config``), and a checkpoint
helper that reports a checkpoint from every rank (``EveryRankCheckpointIO``). Imports no framework; the backend
imports toyfw on the workers."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
from dataclasses import dataclass
from typing import ClassVar

import trainkit
from trainkit import Backend, BackendConfig, DataParallelTrainer, hookimpl

FRAMEWORK = "trainkit-toyfw"  # toyfw comes with this distribution


_links: list[socket.socket] = []  # this worker's links of the rendezvous: rank 0 to every other rank


def _listen(host: str, port: int) -> None:
    _links.append(socket.create_server((host, port)))


def _join(reverse_ranks: bool, host: str, port: int) -> None:
    """Every rank links to rank 0 at (host, port) and keeps the link (a framework's rendezvous)."""
    import toyfw

    ctx = trainkit.get_context()
    rank, size = ctx.get_world_rank(), ctx.get_world_size()
    if rank == 0:
        server = _links[0]
        server.settimeout(60)
        _links.extend(server.accept()[0] for _ in range(size - 1))
    else:
        _links.append(socket.create_connection((host, port), timeout=60))
    toyfw.init(size - 1 - rank if reverse_ranks else rank)


def _leave() -> None:
    import toyfw

    while _links:
        _links.pop().close()
    toyfw.shutdown()


def shard(rows: list) -> list:
    """The data helper: this rank's rows, strided by global rank."""
    ctx = trainkit.get_context()
    return rows[ctx.get_world_rank()::ctx.get_world_size()]


def shard_by_local_rank(rows: list) -> list:  # the mistake: two nodes train on the same rows
    ctx = trainkit.get_context()
    return rows[ctx.get_local_rank()::ctx.get_local_world_size()]


_current_group = None  # the driver's worker group of the attempt in progress
_armed: list = []  # watchdogs armed in on_start and not cancelled since (StaleTimerConfig's)


def _expire() -> None:
    """The watchdog fires: the rendezvous took too long, toyfw goes down on the current group."""
    with contextlib.suppress(Exception):
        _current_group.execute(_leave)


class ToyBackend(Backend):
    def on_start(self, worker_group, backend_config: ToyConfig) -> None:
        global _current_group
        _current_group = worker_group
        if backend_config.watchdog_s:
            # the mistake: cancelled once training starts, never when setup fails after this point,
            # so the watchdog of a failed attempt fires in the next one. (Here it expires as the next
            # attempt's training starts, whatever the machine's speed: a timer's delay would make the
            # seeded mistake's harm depend on how fast the retry came.)
            _armed.append(self)
        if backend_config.skips_one_worker and len(worker_group) == 1:
            return  # the mistake: "nothing to set up for one worker", yet the helpers need toyfw's rank
        host, port = worker_group.free_address(0)
        host = backend_config.fixed_host or host
        port = backend_config.fixed_port or port
        worker_group.execute_single(0, _listen, host, port)
        worker_group.execute(_join, backend_config.reverse_ranks, host, port)

    def on_training_start(self, worker_group, backend_config: ToyConfig) -> None:
        if any(armed is not self for armed in _armed):  # an earlier attempt's, never cancelled: it expires now
            _expire()
        _armed.clear()  # this attempt's is cancelled as its training starts

    def on_shutdown(self, worker_group, backend_config: ToyConfig) -> None:
        if backend_config.tears_down:
            worker_group.execute(_leave)

    def on_local_start(self, backend_config: ToyConfig) -> None:
        import toyfw

        os.environ["TOYFW_LOCAL"] = "1"
        # the mistake of EnvRankConfig: a launcher's rank variable, when set, is taken over trainkit's
        toyfw.init(int(os.environ.get("TOYFW_RANK", "0")) if backend_config.rank_from_env else 0)

    def on_local_shutdown(self, backend_config: ToyConfig) -> None:
        if backend_config.tears_down:
            os.environ.pop("TOYFW_LOCAL")
            _leave()


@dataclass
class ToyConfig(BackendConfig):
    reverse_ranks: ClassVar[bool] = False
    tears_down: ClassVar[bool] = True
    fixed_host: ClassVar[str | None] = None
    fixed_port: ClassVar[int | None] = None
    skips_one_worker: ClassVar[bool] = False
    rank_from_env: ClassVar[bool] = False
    watchdog_s: ClassVar[float] = 0.0

    @property
    def backend_cls(self):
        return ToyBackend


class ReversedRanksConfig(ToyConfig):
    reverse_ranks = True


class NoTeardownConfig(ToyConfig):
    tears_down = False


class BrokenTrainerConfig(ToyConfig):
    pass


class LoopbackConfig(ToyConfig):
    fixed_host = "127.0.0.1"  # the mistake: every rank dials 127.0.0.1 for the rendezvous


class FixedPortConfig(ToyConfig):
    fixed_port = 29517  # the mistake: the framework's default port, so a second job on the host fails to bind


class SkipsOneWorkerConfig(ToyConfig):
    skips_one_worker = True


class StaleTimerConfig(ToyConfig):
    watchdog_s = 2.0


class EnvRankConfig(ToyConfig):
    rank_from_env = True


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


class OwnKeywordConfig(ToyConfig):
    pass


class OwnKeywordTrainer(DataParallelTrainer):
    def __init__(self, train_loop_per_worker, *, toy_config: OwnKeywordConfig | None = None, **kwargs):
        kwargs.setdefault("backend_config", OwnKeywordConfig())  # the mistake: toy_config is never used
        super().__init__(train_loop_per_worker, **kwargs)


class ForgivingConfig(ToyConfig):
    pass


class ForgivingTrainer(DataParallelTrainer):
    def __init__(self, train_loop_per_worker, **kwargs):
        kwargs.setdefault("backend_config", ForgivingConfig())
        super().__init__(train_loop_per_worker, **kwargs)

    def fit(self):
        try:
            return super().fit()
        except trainkit.TrainingFailedError as exc:  # the mistake: "log it and hand back what we have"
            return trainkit.Result(metrics=None, checkpoint=None, path="", error=exc)


class OwnRunConfigConfig(ToyConfig):
    pass


class OwnRunConfigTrainer(DataParallelTrainer):
    def __init__(self, train_loop_per_worker, **kwargs):
        kwargs.setdefault("backend_config", OwnRunConfigConfig())
        given = kwargs.get("run_config") or trainkit.RunConfig()
        # the mistake: a RunConfig of its own, keeping a few fields: the user's FailureConfig is lost
        kwargs["run_config"] = trainkit.RunConfig(name=given.name, storage_path=given.storage_path,
                                                  callbacks=given.callbacks, verbose=0)
        super().__init__(train_loop_per_worker, **kwargs)


class ToyCheckpointIO(trainkit.CheckpointIO):
    def save(self, state, directory):
        with open(os.path.join(directory, "state.json"), "w") as f:
            json.dump(state, f)

    def load_from_directory(self, directory):
        with open(os.path.join(directory, "state.json")) as f:
            return json.load(f)


def resume(checkpoint):
    """The resume helper: the state in ``checkpoint``."""
    return ToyCheckpointIO().load(checkpoint)


_last_saved: list[str] = []


class LastSavedCheckpointIO(ToyCheckpointIO):
    def save(self, state, directory):
        super().save(state, directory)
        _last_saved.append(directory)


def resume_last_saved(checkpoint):  # the mistake: a path of its own, not the checkpoint given
    return ToyCheckpointIO().load_from_directory(_last_saved[-1])


def report_callback(metrics):
    """The report callback, as the framework calls it at every step on every rank."""
    trainkit.report(metrics)


def rank0_report_callback(metrics):  # the mistake: the other ranks never report, so no report completes
    if trainkit.get_context().get_world_rank() == 0:
        trainkit.report(metrics)


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
    registry.register("toy_loopback", LoopbackConfig)
    registry.register("toy_own_keyword", OwnKeywordConfig, OwnKeywordTrainer)
    registry.register("toy_own_run_config", OwnRunConfigConfig, OwnRunConfigTrainer)
    registry.register("toy_fixed_port", FixedPortConfig)
    registry.register("toy_skips_one_worker", SkipsOneWorkerConfig)
    registry.register("toy_env_rank", EnvRankConfig)
    registry.register("toy_stale_timer", StaleTimerConfig)
    registry.register("toy_forgiving", ForgivingConfig, ForgivingTrainer)


# The journey: one small training run through the plugin's helpers, as a user writes it. A model
# y = w * x + b, trained by SGD with momentum on rows r -> (x, y) = ((r + 1) / n, 3x + 1), gradients
# averaged over the ranks with toyfw.all_gather; a checkpoint of the weights and momenta each step.

def prepare_rows(rows: list) -> list:
    """The data helper: this rank's rows, strided by toyfw's rank (the remainder to the first ranks)."""
    import toyfw

    return rows[toyfw.get_rank()::trainkit.get_context().get_world_size()]


def prepare_rows_evenly(rows: list) -> list:  # the mistake: the remainder of an uneven split is dropped
    import toyfw

    per = len(rows) // trainkit.get_context().get_world_size()
    return rows[toyfw.get_rank() * per:(toyfw.get_rank() + 1) * per]


def _sum(value: float) -> float:
    import toyfw

    return sum(toyfw.all_gather(value))


def train_step(state: dict, rows: list, n: int) -> tuple[dict, float]:
    """One step over this rank's rows; the gradient and the loss are the mean over every rank's rows."""
    samples = [((r + 1) / n, 3 * (r + 1) / n + 1) for r in rows]
    errors = [(state["w"] * x + state["b"] - y, x) for x, y in samples]
    count = _sum(float(len(samples)))
    loss = _sum(sum(e * e for e, _ in errors)) / count
    gw, gb = _sum(sum(2 * e * x for e, x in errors)) / count, _sum(sum(2 * e for e, _ in errors)) / count
    mw, mb = 0.9 * state["mw"] + gw, 0.9 * state["mb"] + gb
    return {"w": state["w"] - 0.1 * mw, "b": state["b"] - 0.1 * mb, "mw": mw, "mb": mb,
            "step": state["step"] + 1}, loss


def resume_weights_only(checkpoint) -> dict:  # the mistake: the optimizer's momenta start again from zero
    state = resume(checkpoint)
    return {**state, "mw": 0.0, "mb": 0.0}


class FixedDirCheckpointIO(ToyCheckpointIO):
    """The mistake: every run on the host stages its checkpoint in one fixed directory."""

    def report(self, metrics, state):
        import time

        staging = os.path.join(tempfile.gettempdir(), "toyfw-checkpoint")
        os.makedirs(staging, exist_ok=True)
        if trainkit.get_context().get_world_rank() != 0:
            trainkit.report(metrics)
            return
        self.save(state, staging)
        time.sleep(1.0)  # a big model's save takes a while: another run's save lands meanwhile
        trainkit.report(metrics, checkpoint=trainkit.Checkpoint.from_directory(staging))


def journey(config: dict, prepare=prepare_rows, io=None, restore=None) -> None:
    """The journey hook: ``config["steps"]`` steps in all, resumed from trainkit.get_checkpoint()."""
    io, restore = io or ToyCheckpointIO(), restore or resume
    state = {"w": 0.1 * config["seed"], "b": 0.0, "mw": 0.0, "mb": 0.0, "step": 0}
    checkpoint = trainkit.get_checkpoint()
    if checkpoint is not None:
        state = restore(checkpoint)
    rows = prepare(config["rows"])
    while state["step"] < config["steps"]:
        state, loss = train_step(state, rows, len(config["rows"]))
        io.report({"step": state["step"], "loss": loss, "rows": rows}, state)
