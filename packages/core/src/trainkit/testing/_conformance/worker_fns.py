"""The training functions the conformance suites run on the workers, and the callback that
collects every rank's reports in the driver."""

from __future__ import annotations

import os
import uuid
from typing import Any

import trainkit
from trainkit import CheckpointIO


class _Collect(trainkit.UserCallback):
    """Every rank's metrics of every report, in the driver."""

    def __init__(self) -> None:
        self.reports: list[list[dict[str, Any]]] = []

    def after_report(self, run_context, metrics, checkpoint) -> None:
        self.reports.append(metrics)


def _ranks_fn(config: dict) -> None:
    ctx = trainkit.get_context()
    rank = ctx.get_world_rank()
    trainkit.report({"world_rank": rank, "local_rank": ctx.get_local_rank(), "node_rank": ctx.get_node_rank(),
                     "world_size": ctx.get_world_size(), "local_world_size": ctx.get_local_world_size(),
                     "framework_rank": int(config["framework_rank"]()),
                     "gathered": [float(v) for v in config["all_gather"](float(rank))]})


def _failing_fn(config: dict) -> None:
    config["all_gather"](1.0)  # the backend is up and communicating before the failure
    rank = trainkit.get_context().get_world_rank()
    if rank == config["failing_rank"]:
        raise ValueError(f"conformance: rank {rank} fails on purpose")
    trainkit.report({"rank": rank})


def _report_callback_fn(config: dict) -> None:
    rank = trainkit.get_context().get_world_rank()
    for step in range(3):
        config["report_callback"]({"loss": 1.0 / (step + 1), "rank_value": float(rank)})


def _concurrent_fn(config: dict) -> None:
    """One of two runs at once: rank 0 waits (up to 120 s) until the other run is training too, or
    failed, so that both runs' frameworks are up together; then an all-gather of run-marked values."""
    import time

    run, sync = config["run"], config["sync"]
    if trainkit.get_context().get_world_rank() == 0:
        open(os.path.join(sync, f"ready{run}"), "w").close()
        other = 1 - run
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
                os.path.exists(os.path.join(sync, f"{what}{other}")) for what in ("ready", "failed")):
            time.sleep(0.05)
    rank = trainkit.get_context().get_world_rank()
    trainkit.report({"gathered": [float(v) for v in config["all_gather"](float(100 * run + rank))]})


def _fails_once_fn(config: dict) -> None:
    ctx = trainkit.get_context()
    config["all_gather"](1.0)
    if ctx.get_attempt() == 0 and ctx.get_world_rank() == 0:
        raise RuntimeError("conformance: the first attempt fails on purpose")
    trainkit.report({"attempt": ctx.get_attempt()})



def _local_fn(config: dict) -> None:
    ctx = trainkit.get_context()
    trainkit.report({"world_rank": ctx.get_world_rank(), "world_size": ctx.get_world_size()})



def _save_and_report_fn(config: dict) -> None:
    """Every rank reports its own state through the helper; each report that carries a checkpoint
    leaves a file naming its rank (whatever way the helper calls ``trainkit.report``)."""
    from trainkit._internal.worker.session import Session

    io: CheckpointIO = config["checkpoint_io"]
    rank, report = trainkit.get_context().get_world_rank(), Session.report

    def recorded_report(session: Session, metrics: dict, checkpoint: Any = None, *args: Any, **kwargs: Any) -> None:
        if checkpoint is not None:
            open(os.path.join(config["saves"], f"{rank}-{uuid.uuid4().hex}"), "w").close()
        report(session, metrics, checkpoint, *args, **kwargs)

    Session.report = recorded_report
    try:
        io.report({"rank": rank}, config["states"][rank])
    finally:
        Session.report = report



def _resume_fn(config: dict) -> None:
    checkpoint = trainkit.get_checkpoint()
    assert checkpoint is not None, "the resumed run got no checkpoint"
    config["assert_same"](config["checkpoint_io"].load(checkpoint), config["states"][0])
    trainkit.report({"resumed": 1})



def _shard_fn(config: dict) -> None:
    """This rank's rows of each dataset size, through the plugin's data helper."""
    rows = {str(size): [int(r) for r in config["shard"](list(range(size)))] for size in config["sizes"]}
    trainkit.report({"world_rank": trainkit.get_context().get_world_rank(), "rows": rows})


def _journey_fn(config: dict) -> None:
    """The plugin's journey (its ``journey`` hook) on this rank, under the kit's conditions: a failure
    on one rank at one step (``fail``: [rank, step], raised from inside the report the journey makes,
    so from inside the framework's loop), or on rank 0 of attempt 0 before the journey starts
    (``fail_first_attempt``); a retried attempt waits ``hold_s`` before the journey."""
    from trainkit._internal.worker.session import Session

    ctx = trainkit.get_context()
    rank = ctx.get_world_rank()
    if config.get("fail_first_attempt") and ctx.get_attempt() == 0 and rank == 0:
        raise RuntimeError("conformance: attempt 0 fails on purpose after the backend set up")
    if config.get("hold_s") and ctx.get_attempt() > 0:  # what attempt 0 left behind (a timer) has time to act
        import time

        time.sleep(config["hold_s"])
    if config.get("sync"):  # two runs at once: both start their journeys together
        _wait_for_the_other_run(config["sync"], config["seed"], rank)
    fail, report = config.get("fail"), Session.report

    def failing_report(session: Session, metrics: dict, *args: Any, **kwargs: Any) -> None:
        if fail and rank == fail[0] and metrics.get("step", metrics.get("iteration")) == fail[1]:
            raise ValueError(f"conformance: rank {rank} fails at step {fail[1]} on purpose")
        report(session, metrics, *args, **kwargs)

    Session.report = failing_report
    try:
        config["journey"]({k: config[k] for k in ("steps", "rows", "seed")})
    finally:
        Session.report = report


def _wait_for_the_other_run(sync: str, run: int, rank: int, timeout_s: float = 120) -> None:
    """Rank 0 of run ``run`` (0 or 1) marks itself ready in ``sync`` and waits for the other run's
    rank 0 (up to ``timeout_s``); the other ranks go on (the framework holds them at its first step)."""
    import time

    if rank != 0:
        return
    open(os.path.join(sync, f"ready{run}"), "w").close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not os.path.exists(os.path.join(sync, f"ready{1 - run}")):
        time.sleep(0.02)
