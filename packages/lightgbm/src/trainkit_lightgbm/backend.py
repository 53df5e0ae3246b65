"""``LightGBMBackend``: gives every worker ports and the list of all workers' addresses, which
``get_network_params()`` hands to ``lightgbm.train``.

A port LightGBM has listened on lingers in TIME_WAIT after training, so binding it again fails;
each worker therefore gets a set of ports up front and every ``get_network_params()`` call moves
all ranks to the next one (ranks call it in step, once per ``lightgbm.train``). The worker holds
its ports (bound, not listening) so that no other process takes one meanwhile, and lets go of each
in that call, just before LightGBM binds it (LightGBM's socket sets no SO_REUSEADDR: it cannot bind
beside the hold).
"""

from __future__ import annotations

import math
from typing import Any

import trainkit
from trainkit import Backend
from trainkit.backend import release_port

from trainkit_lightgbm.config import LightGBMConfig

TRAININGS_PER_ATTEMPT = 64  # fresh ports for this many lightgbm.train calls per worker and attempt
_network: dict[str, Any] | None = None  # this worker's, between on_training_start and on_shutdown


def get_network_params() -> dict[str, Any]:
    """LightGBM's network parameters for this worker's next ``lightgbm.train`` (``machines``,
    ``local_listen_port``, ``num_machines``, ``time_out``): merge them into its params. Every rank
    calls it once per training, in step. Empty in local mode, where LightGBM trains alone.

    Example::

        params = {"objective": "binary", "tree_learner": "data", "pre_partition": True, **get_network_params()}
    """
    if _network is None:
        return {}
    call = _network["calls"]
    if call >= TRAININGS_PER_ATTEMPT:
        raise RuntimeError(f"get_network_params() was called {call + 1} times in this attempt; each worker has "
                           f"fresh ports for {TRAININGS_PER_ATTEMPT} trainings (LightGBM cannot reuse a port at once)")
    _network["calls"] += 1
    ports = [worker_ports[call] for _, worker_ports in _network["offers"]]
    release_port(ports[trainkit.get_context().get_world_rank()])  # LightGBM binds without SO_REUSEADDR
    return {"machines": ",".join(f"{host}:{port}" for (host, _), port in zip(_network["offers"], ports)),
            "local_listen_port": ports[trainkit.get_context().get_world_rank()],
            "num_machines": len(ports), "time_out": _network["timeout_min"]}


def _join_network(offers: list[tuple[str, list[int]]], timeout_min: int) -> None:
    global _network
    _network = {"offers": offers, "timeout_min": timeout_min, "calls": 0}


def _leave_network() -> None:
    global _network
    _network = None


class LightGBMBackend(Backend):
    def on_training_start(self, worker_group, backend_config: LightGBMConfig) -> None:
        offers = worker_group.free_ports(TRAININGS_PER_ATTEMPT, hold=True)  # each held until its training
        worker_group.execute(_join_network, offers, math.ceil(backend_config.timeout_s / 60))

    def on_shutdown(self, worker_group, backend_config: LightGBMConfig) -> None:
        worker_group.execute(_leave_network)
