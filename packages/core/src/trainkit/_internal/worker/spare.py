"""Spare workers: when a worker group of the embedded cluster shuts down, the driver starts the same
number of worker processes for the next group of the same shape (the next attempt, or the next fit
of a notebook or an HPO loop), with the framework already imported.

They are new processes that never ran a training function, so a fit inherits nothing of another
(environment, modules, process group, threads, open files): what is reused is the cluster and the
time it takes to start a process and import the framework. They hold no resources while they wait
(``num_cpus=0``); the group that takes them places its placement group as a cold start does, so
Tune trials and the user's own tasks see the whole machine between fits. Only CPU workers of at
most one CPU each are prestarted (a GPU worker's devices, and a larger worker's thread count, are
given to a process as Ray starts it). ``TRAINKIT_SPARE_WORKERS=0`` turns it off (and the warm
cluster's spare workers: trainkit-warm).

A run that may restart (``max_failures`` left) prestarts them as soon as its attempt has started, so
that a restart finds them ready (a process start and the framework's import less on every restart);
they then wait beside the running attempt, at the memory cost of its idle processes. So does every
fit after the first in one driver (a notebook, a search loop): the next fit then finds its workers'
imports done even when it follows at once, as the end of a fit is too late for that.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from trainkit._internal.cluster import ray_runtime


class Shape(NamedTuple):
    """What a group must match to take prestarted workers."""

    num_workers: int
    prewarm_modules: tuple[str, ...]
    runtime_env: str = ""  # runtime_env.key() of the workers' runtime_env: workers never serve another


@dataclass(frozen=True)
class Spare:
    shape: Shape
    actors: list[Any]
    node: Any  # the embedded cluster they belong to


_spare: Spare | None = None
_fits = 0  # fits started in this driver


def fit_started() -> None:
    global _fits
    _fits += 1


def fits_in_a_row() -> bool:
    """This driver started fits before the current one: more may follow."""
    return _fits > 1


ENV = "TRAINKIT_SPARE_WORKERS"  # "0": no spare workers
OLD_ENV = "TRAINKIT_WARM_WORKERS"  # its name before 0.1 (warm names the warm cluster only)


def turned_on() -> bool:
    """Spare workers are on (``TRAINKIT_SPARE_WORKERS``; the old name still read, with a warning)."""
    value = os.environ.get(ENV)
    if value is None and (value := os.environ.get(OLD_ENV)) is not None:
        warnings.warn(f"{OLD_ENV} is now {ENV}: set that instead (the old name goes in the next minor release)",
                      DeprecationWarning, stacklevel=2)
    return value != "0"


def fits(resources: dict[str, float]) -> bool:
    """Workers with ``resources`` may be prestarted (CPU-only, at most one CPU each)."""
    return turned_on() and not set(resources) - {"CPU", "memory"} and resources.get("CPU", 0) <= 1


def shape(num_workers: int, resources: dict[str, float], prewarm_modules: tuple[str, ...],
          runtime_env: str = "") -> Shape | None:
    """The shape of a group that may take this driver's prestarted workers; None for one that never
    can, or on an attached cluster (trainkit-warm's keeper holds spares for every driver)."""
    if ray_runtime.embedded_node() is None or not fits(resources):
        return None
    return Shape(num_workers, prewarm_modules, runtime_env)


def take(wanted: Shape | None) -> list[Any] | None:
    """The prestarted workers when they match ``wanted``; any others are stopped."""
    global _spare
    spare, _spare = _spare, None
    if spare is None or spare.node is not ray_runtime.embedded_node():  # none, or of a cluster since stopped
        return None
    if spare.shape == wanted:
        return spare.actors
    _kill(spare.actors)
    return None


def prestart(wanted: Shape | None, start_actor: Callable[[tuple[str, ...]], Any]) -> None:
    """Start ``wanted``'s workers, each with ``start_actor(prewarm_modules)`` (an actor handle), not
    waited for; those of ``wanted`` started already are kept."""
    global _spare
    if wanted is not None and _spare is not None and _spare.shape == wanted \
            and _spare.node is ray_runtime.embedded_node():
        return
    take(None)
    if wanted is not None:
        actors = [start_actor(wanted.prewarm_modules) for _ in range(wanted.num_workers)]
        _spare = Spare(wanted, actors, ray_runtime.embedded_node())


def _kill(actors: list[Any]) -> None:
    import ray

    for actor in actors:
        ray.kill(actor, no_restart=True)
