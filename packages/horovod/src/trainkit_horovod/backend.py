"""``HorovodBackend``: Horovod's Gloo rendezvous for the worker group, as ``horovodrun --gloo`` would
set it up but with trainkit's workers and ranks.

Rank 0 hosts Horovod's rendezvous HTTP server (in its own process, so a failed attempt takes it down
with the workers), and every worker gets the ``HOROVOD_*`` variables ``hvd.init()`` reads: its
rank, local and cross ranks and sizes, its host, the server's address and its Gloo interface.
The server lives until training ends: Horovod uses it for ``hvd.init()`` and for process sets.
"""

from __future__ import annotations

import socket
import sys
import threading
from typing import Any, Sequence

from trainkit import Backend
from trainkit.backend import WorkerGroup, WorkerInfo

from trainkit_horovod.config import HorovodConfig

_server: Any = None  # rank 0's (HTTP server, thread), between on_start and on_shutdown
FRAMEWORKS = ("horovod.torch", "horovod.tensorflow")  # the bindings whose shutdown() ends a context


def slots(workers: Sequence[WorkerInfo]) -> list[dict[str, Any]]:
    """Horovod's slot of every worker, in rank order: its host is its node; cross ranks count the
    nodes that have a worker with the same local rank."""
    result = []
    for w in workers:
        peers = sorted(v.node_rank for v in workers if v.local_rank == w.local_rank)
        result.append({"hostname": w.node_id, "rank": w.world_rank, "local_rank": w.local_rank,
                       "cross_rank": peers.index(w.node_rank), "size": len(workers),
                       "local_size": w.local_world_size, "cross_size": len(peers)})
    return result


def _interface_of(ip: str) -> str:
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addresses):
            return name
    raise RuntimeError(f"no network interface holds {ip}; name one with HorovodConfig(nics={{'eth0'}})")


def _start_rendezvous(host: str, plan: list[dict[str, Any]], verbose: int) -> tuple[str, int]:
    global _server
    from horovod.runner.common.util.hosts import SlotInfo
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    httpd = RendezvousHTTPServer((host, 0), RendezvousHandler, verbose)  # port 0: no race for a free port
    httpd.init([SlotInfo(**slot) for slot in plan])
    thread = threading.Thread(target=httpd.serve_forever, name="horovod-rendezvous", daemon=True)
    thread.start()
    _server = (httpd, thread)
    return host, httpd.server_address[1]


def _stop_rendezvous() -> None:
    global _server
    if _server is not None:
        httpd, thread = _server
        httpd.shutdown()
        httpd.server_close()
        thread.join()
        _server = None


def _node_interface(loopback: bool) -> str:
    import ray

    return _interface_of("127.0.0.1" if loopback else ray.util.get_node_ip_address())


def _env(slot: dict[str, Any], address: tuple[str, int], iface: str, timeout_s: float) -> dict[str, str]:
    """The ``HOROVOD_*`` variables ``hvd.init()`` reads on the worker of ``slot``."""
    return {**{f"HOROVOD_{key.upper()}": str(value) for key, value in slot.items()},
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": address[0], "HOROVOD_GLOO_RENDEZVOUS_PORT": str(address[1]),
            "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": iface,
            "HOROVOD_GLOO_TIMEOUT_SECONDS": str(max(1, round(timeout_s)))}


def _shutdown_horovod() -> None:
    for name in FRAMEWORKS:
        if name in sys.modules:
            sys.modules[name].shutdown()


class HorovodBackend(Backend):
    def on_start(self, worker_group: WorkerGroup, backend_config: HorovodConfig) -> None:
        host = worker_group.node_address(0)  # loopback when the group is on one node; its server picks its port
        plan = slots(worker_group.workers)
        address = worker_group.execute_single(0, _start_rendezvous, host, plan, backend_config.verbose)
        nics = sorted(backend_config.nics) if backend_config.nics else None
        ifaces = [nics[0]] * len(plan) if nics else worker_group.execute(_node_interface, host == "127.0.0.1")
        worker_group.set_env([_env(slot, address, iface, backend_config.timeout_s)  # undone at teardown
                              for slot, iface in zip(plan, ifaces)])

    def on_shutdown(self, worker_group: WorkerGroup, backend_config: HorovodConfig) -> None:
        worker_group.execute(_shutdown_horovod)
        worker_group.execute_single(0, _stop_rendezvous)
