"""``LightGBMBackend``: gives every worker ports and the list of all workers' addresses, which
``get_network_params()`` hands to ``lightgbm.train``.

A port LightGBM has listened on lingers in TIME_WAIT after training, so binding it again fails;
each worker therefore gets a set of ports up front and every ``get_network_params()`` call moves
all ranks to the next one (ranks call it in step, once per ``lightgbm.train``).
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

import trainkit
from trainkit import Backend

from trainkit_lightgbm.config import LightGBMConfig

PORTS_PER_WORKER = 16
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
    call = _network["calls"] % PORTS_PER_WORKER
    _network["calls"] += 1
    ports = [worker_ports[call] for worker_ports in _network["ports"]]
    return {"machines": ",".join(f"{host}:{port}" for host, port in zip(_network["hosts"], ports)),
            "local_listen_port": ports[trainkit.get_context().get_world_rank()],
            "num_machines": len(ports), "time_out": _network["timeout_min"]}


def _free_ports(hosts: list[str], count: int) -> list[int]:
    """``count`` distinct ports free now on this rank's host (held open together, so no two are alike)."""
    host = hosts[trainkit.get_context().get_world_rank()]
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]


def _join_network(hosts: list[str], ports: list[list[int]], timeout_min: int) -> None:
    global _network
    _network = {"hosts": hosts, "ports": ports, "timeout_min": timeout_min, "calls": 0}


def _leave_network() -> None:
    global _network
    _network = None


class LightGBMBackend(Backend):
    def on_training_start(self, worker_group, backend_config: LightGBMConfig) -> None:
        hosts = [host for host, _ in worker_group.free_addresses()]
        for _ in range(5):  # ranks on one host may, rarely, be offered the same port
            ports = worker_group.execute(_free_ports, hosts, PORTS_PER_WORKER)
            taken = [(host, port) for host, worker_ports in zip(hosts, ports) for port in worker_ports]
            if len(set(taken)) == len(taken):
                break
        worker_group.execute(_join_network, hosts, ports, backend_config.timeout_min)

    def on_shutdown(self, worker_group, backend_config: LightGBMConfig) -> None:
        worker_group.execute(_leave_network)
