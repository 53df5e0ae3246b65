"""Preemption, as Ray Train 2.60 has it: a node of the run drained with a deadline (``ray drain-node
--reason=DRAIN_NODE_REASON_PREEMPTION``, the autoscaler's or KubeRay's spot termination) or a worker
process SIGTERM'd (Slurm, a VM shutting down) is a *notice*, not a failure.

The driver learns of it (``PreemptionWatch``: it polls Ray's draining nodes, and a SIGTERM'd rank
says so in its events), tells every rank (``Worker.mark_preempted``), and keeps the attempt running
until the deadline plus ``FailureConfig.preemption_grace_s``; then, or once a preempted rank is
gone, it ends the attempt with a ``PreemptionError``, which the failure policy counts against
``max_preemption_failures``. ``get_preemption_info()`` on the ranks returns rank 0's notice at each
call (``agreed_info``), so every rank acts on it at the same step.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from trainkit._internal.worker.context_types import PreemptionInfo
from trainkit.errors import PreemptionError

logger = logging.getLogger("trainkit")

SIGTERM_DEADLINE_S = 30.0  # Kubernetes' and Slurm's default grace before SIGKILL
UNKNOWN_DEADLINE_S = 120.0  # a drain without a deadline: how long the driver waits (Ray Train's)
DRAIN_POLL_S = float(os.environ.get("TRAINKIT_PREEMPTION_POLL_S", "1.0"))


def merge(old: PreemptionInfo | None, new: PreemptionInfo) -> PreemptionInfo:
    """Both notices in one: every preempted node's ranks, the earliest deadline."""
    if old is None:
        return new
    nodes: dict[str, set[int]] = {}
    for info in (old, new):
        for node, ranks in info.preempted_node_to_ranks.items():
            nodes.setdefault(node, set()).update(ranks)
    deadlines = [d for d in (old.deadline_ms, new.deadline_ms) if d]
    return PreemptionInfo(min(deadlines, default=None), {node: sorted(ranks) for node, ranks in sorted(nodes.items())})


def sigterm_deadline_ms() -> int:
    """When a process SIGTERM'd now is going away: ``$TRAINKIT_SIGTERM_DEADLINE_S`` from now."""
    return int((time.time() + float(os.environ.get("TRAINKIT_SIGTERM_DEADLINE_S", SIGTERM_DEADLINE_S))) * 1000)


def agreed_info(session: Any) -> PreemptionInfo | None:
    """``get_preemption_info()``: rank 0's notice at this call, on every rank."""
    context = session.context
    if context.world_size == 1:
        return session.preemption_info
    import ray

    from trainkit import collective

    if not ray.is_initialized():
        raise RuntimeError("trainkit.get_preemption_info() works in a training function run by a trainkit "
                           "Trainer; a script run by `trainkit launch` gets the SIGTERM itself")
    call = session.preemption_calls
    session.preemption_calls += 1
    actor = collective.rendezvous(session)
    if context.world_rank == 0:
        info = session.preemption_info
        actor.publish.remote(call, info)
        return info
    with session.progress.waiting_for_peers():
        return ray.get(actor.rank_zero_value.remote(call, collective.DEFAULT_TIMEOUT_S))


def _draining_nodes() -> dict[str, int]:
    """Ray's draining nodes: node id -> deadline (UNIX ms, 0: none)."""
    from trainkit._internal.cluster.ray_private import draining_nodes

    return draining_nodes()


class PreemptionWatch:
    """The driver's view of a preemption during one attempt."""

    def __init__(self, workers: list[Any], grace_s: float):
        self._node_of = {w.world_rank: w.node_id for w in workers}
        self._ranks_on: dict[str, list[int]] = {}
        for w in workers:
            self._ranks_on.setdefault(w.node_id, []).append(w.world_rank)
        self._grace_s = grace_s
        self._next_poll = 0.0
        self._poll_failed = False
        self.info: PreemptionInfo | None = None
        self._told: PreemptionInfo | None = None
        self._detected_s: float | None = None

    def on_rank(self, rank: int, deadline_ms: int | None) -> None:
        """``rank`` is going away (its process got SIGTERM), at ``deadline_ms`` if known."""
        self._add(PreemptionInfo(deadline_ms, {self._node_of[rank]: [rank]}))

    def poll_drains(self) -> None:
        """Ask Ray which of the attempt's nodes are draining (at most every ``DRAIN_POLL_S``)."""
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + DRAIN_POLL_S
        try:
            drained = {node: deadline for node, deadline in _draining_nodes().items() if node in self._ranks_on}
        except Exception as exc:  # noqa: BLE001 - a GCS hiccup: the next poll asks again
            if not self._poll_failed:
                logger.warning("could not ask Ray for draining nodes (asked again every %g s): %s", DRAIN_POLL_S, exc)
            self._poll_failed = True
            return
        if drained:
            self._add(PreemptionInfo(min((d for d in drained.values() if d), default=None),
                                     {node: self._ranks_on[node] for node in drained}))

    def _add(self, info: PreemptionInfo) -> None:
        self.info = merge(self.info, info)
        if self._detected_s is None:
            self._detected_s = time.monotonic()

    def take_news(self) -> PreemptionInfo | None:
        """The notice, when it is new or changed since the last call (to tell the ranks)."""
        if self.info == self._told:
            return None
        self._told = self.info
        return self.info

    def is_preempted(self, rank: int) -> bool:
        return self.info is not None and rank in self.info.preempted_ranks

    def deadline_passed(self) -> bool:
        """The deadline (or, without one, ``UNKNOWN_DEADLINE_S`` after the notice) plus the grace."""
        if self.info is None:
            return False
        if self.info.deadline_ms:  # Ray's deadline is wall-clock time
            return time.time() >= self.info.deadline_ms / 1000 + self._grace_s
        return time.monotonic() >= self._detected_s + UNKNOWN_DEADLINE_S + self._grace_s

    def error(self, drain_timed_out: bool, cause: BaseException | None = None) -> PreemptionError:
        """The attempt's end; ``cause``: what ended it first (a rank's death, say)."""
        error = PreemptionError(self.info, drain_timed_out, getattr(cause, "worker_failures", None),
                                worker_traceback=getattr(cause, "worker_traceback", ""))
        error.__cause__ = cause
        return error


def died_of_preemption(error: BaseException | None) -> bool:
    """A worker error Ray marks as its node's preemption (``RayActorError.preempted``)."""
    return any(getattr(e, "preempted", False) for e in getattr(error, "worker_failures", {}).values())
