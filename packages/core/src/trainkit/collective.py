"""Collectives between a run's workers that need no framework: ``barrier()`` and
``broadcast_from_rank_zero(obj)``, for any backend (XGBoost, JAX, plain Python...).

Every rank must make the same collective calls in the same order, as with any collective. They go
through one small Ray actor per attempt, started by the first call (a run that never calls them
starts nothing); values travel pickled, so keep them small (a config, a path, a few numbers).
In local mode both return at once.

Example::

    from trainkit import collective

    def train_fn(config):
        plan = collective.broadcast_from_rank_zero(make_plan() if is_rank_zero() else None)
        collective.barrier()                     # every rank has the plan
"""

from __future__ import annotations

import asyncio
from typing import Any

from trainkit._internal.worker.session import get_session

__all__ = ["barrier", "broadcast_from_rank_zero"]

DEFAULT_TIMEOUT_S = 1800.0


class _Rendezvous:
    """Gathers one value per rank for each collective call, numbered in call order."""

    def __init__(self, world_size: int):
        self._world_size = world_size
        self._calls: dict[int, tuple[dict[int, Any], asyncio.Event, set[int]]] = {}
        self._published: dict[int, tuple[asyncio.Event, list]] = {}  # call -> (set, [value, reads])

    async def publish(self, call: int, value: Any) -> None:
        """Rank 0's value for its call #call of ``rank_zero_value`` (rank 0 does not wait)."""
        published, box = self._published.setdefault(call, (asyncio.Event(), [None, 0]))
        box[0] = value
        published.set()

    async def rank_zero_value(self, call: int, timeout_s: float) -> Any:
        """Rank 0's value for call #call, once rank 0 made it."""
        published, box = self._published.setdefault(call, (asyncio.Event(), [None, 0]))
        try:
            await asyncio.wait_for(published.wait(), timeout_s)
        except asyncio.TimeoutError:
            raise TimeoutError(f"call #{call}: rank 0 did not arrive within {timeout_s:g} s (every rank "
                               "must make the same calls in the same order)") from None
        box[1] += 1
        if box[1] == self._world_size - 1:  # every other rank has it
            del self._published[call]
        return box[0]

    async def exchange(self, call: int, rank: int, value: Any, timeout_s: float) -> dict[int, Any]:
        values, complete, done = self._calls.setdefault(call, ({}, asyncio.Event(), set()))
        values[rank] = value
        if len(values) == self._world_size:
            complete.set()
        try:
            await asyncio.wait_for(complete.wait(), timeout_s)
        except asyncio.TimeoutError:
            missing = sorted(set(range(self._world_size)) - set(values))
            raise TimeoutError(f"collective call #{call}: rank(s) {missing} did not arrive within {timeout_s:g} s "
                               "(every rank must make the same collective calls in the same order)") from None
        done.add(rank)
        if len(done) == self._world_size:  # every rank has its answer
            del self._calls[call]
        return values


def _exchange(caller: str, value: Any, timeout_s: float) -> dict[int, Any]:
    session = get_session(caller)
    context = session.context
    if context.world_size == 1:
        return {0: value}
    import ray

    call = session.collective_calls
    session.collective_calls += 1
    with session.progress.waiting_for_peers():
        return ray.get(rendezvous(session).exchange.remote(call, context.world_rank, value, timeout_s))


def rendezvous_name(experiment_name: str, attempt: int) -> str:
    """The Ray name of an attempt's rendezvous actor."""
    return f"trainkit-collective-{experiment_name}-{attempt}"


def rendezvous(session: Any) -> Any:
    """The attempt's rendezvous actor, started by the first rank that needs it, on the driver's node
    whichever rank that is: a rank's node can be drained, preempted or cut off and the attempt go on
    to its end (a JIT checkpoint, a restart); the driver's node cannot without ending the run."""
    if session.rendezvous is None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        context = session.context
        name = rendezvous_name(context.experiment_name, context.attempt)
        where = {} if session.driver_node is None else {
            "scheduling_strategy": NodeAffinitySchedulingStrategy(session.driver_node, soft=False)}
        session.rendezvous = ray.remote(num_cpus=0)(_Rendezvous).options(
            name=name, get_if_exists=True, **where).remote(context.world_size)
    return session.rendezvous


def barrier(timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Wait until every rank has called ``barrier()``. Raises TimeoutError naming the ranks that
    did not arrive within ``timeout_s``."""
    _exchange("collective.barrier", None, timeout_s)


def broadcast_from_rank_zero(obj: Any = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """Rank 0's ``obj``, on every rank (the others' ``obj`` is ignored). Also a barrier."""
    return _exchange("collective.broadcast_from_rank_zero", obj, timeout_s)[0]
