"""Spare workers the warm cluster's keeper holds for whichever driver comes next (``trainkit up``).

A Ray worker process serves one job, so the raylet's idle workers help only the first driver of a
warm cluster. The keeper therefore starts worker actors of its own ahead: named ``trainkit-spare-*``,
detached, holding no resources (``num_cpus=0``) and importing the prewarmed framework. A driver
whose group could take its own spares (CPU-only workers of at most one CPU, no runtime_env: see
core's ``_internal/worker/spare.py``) claims some instead of starting actors; the keeper starts new ones for the next.

A claim is the spare's own answer (``Worker.claim``): True to one driver only, so two drivers at
once never share one. A claimed spare is still a process that never ran a training function; it
runs in the driver's directory with the driver's code on ``sys.path`` (as Ray's workers of the
driver's own job would), holds its placement as any worker (the group's placement group is placed
as on a cold start), and ends with the group, or by itself once the claiming process is gone (its
owner is the keeper, so Ray would keep it). ``TRAINKIT_SPARE_WORKERS=0`` claims none.
"""

from __future__ import annotations

import os
import random
import sys
import uuid
from typing import Any

from trainkit._internal.cluster.watchdog import identities
from trainkit._internal.worker import spare
from trainkit._internal.worker.actor import actor_options, start_actor

NAMESPACE = "trainkit"
PREFIX = "trainkit-spare-"
CLAIM_WAIT_S = 30.0  # the most a driver waits for a spare it asked (one still starting is no slower than a new one)


def driver_sys_path() -> list[str]:
    """Where the driver's code is, as Ray puts it on the workers of the driver's own job: the
    script's directory where it is on the driver's ``sys.path`` (not under ``python -m``), and the
    working directory."""
    script = os.path.dirname(os.path.realpath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
    paths = [script] if script in sys.path else []
    return list(dict.fromkeys([*paths, os.path.abspath(os.curdir)]))


def claim(count: int, modules: tuple[str, ...]) -> list[Any]:
    """Up to ``count`` of the keeper's spares, each claimed for this process; [] when none is left."""
    import ray

    if not spare.turned_on():
        return []
    started = identities([os.getpid()]).get(os.getpid())
    if started is None:  # no /proc: a spare could not tell when this process is gone
        return []
    names = [entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)
             if entry.get("namespace") == NAMESPACE and entry["name"].startswith(PREFIX)]
    random.shuffle(names)  # two drivers at once mostly ask different spares
    me, path = (os.getpid(), started), driver_sys_path()
    got: list[Any] = []
    while names and len(got) < count:
        asked = {}
        for name in names[:count - len(got)]:
            try:
                actor = ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:  # claimed and ended meanwhile
                continue
            asked[actor.claim.remote(me, modules, path)] = actor
        names = names[count - len(got):]
        if not asked:
            continue
        ready, late = ray.wait(list(asked), num_returns=len(asked), timeout=CLAIM_WAIT_S)
        for ref in ready:
            try:
                if ray.get(ref):
                    got.append(asked[ref])
            except ray.exceptions.RayError:  # it died meanwhile
                pass
        for ref in late:  # still starting: it may yet say yes to us, so nobody else can have it
            ray.kill(asked[ref], no_restart=True)
    return got


class Pool:
    """The keeper's side: ``size`` unclaimed spares, topped up by ``refill`` while no run is going."""

    def __init__(self, size: int, modules: tuple[str, ...]):
        self.size, self.modules = size, modules
        self._waiting: dict[str, Any] = {}  # name -> actor, not known to be claimed
        self._asked: dict[Any, str] = {}  # a claimed() call in flight -> the spare's name

    def refill(self, start_new: bool = True) -> None:
        """Forget the spares taken since; with ``start_new``, start new ones up to ``size``."""
        import ray

        if self._asked:
            ready, _ = ray.wait(list(self._asked), num_returns=len(self._asked), timeout=0)
            for ref in ready:
                name = self._asked.pop(ref)
                try:
                    taken = ray.get(ref)
                except ray.exceptions.RayError:  # ended: claimed and done, or killed
                    taken = True
                if taken:
                    self._waiting.pop(name, None)
        for name, actor in self._waiting.items():
            if name not in self._asked.values():
                self._asked[actor.claimed.remote()] = name
        while start_new and len(self._waiting) < self.size:
            name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
            self._waiting[name] = start_actor(self.modules, name=name, namespace=NAMESPACE, lifetime="detached",
                                              **actor_options({}))
