"""``MyFrameworkBackend``: sets MyFramework's communication up on the workers and tears it down.
Methods run in the driver and act on the workers through ``trainkit.backend.WorkerGroup``; the
functions they pass it run in every worker's process."""

from __future__ import annotations

from trainkit import Backend
from trainkit.backend import WorkerGroup

from trainkit_myframework.config import MyFrameworkConfig


def _join(addr: str, port: int, rank: int, world_size: int, timeout_s: float) -> None:
    import myframework  # TODO: the framework's own initialization

    myframework.init(rank=rank, world_size=world_size, address=(addr, port), timeout=timeout_s)


def _leave() -> None:
    import myframework  # TODO: release what _join set up, so a new attempt can join again

    myframework.shutdown()


class MyFrameworkBackend(Backend):
    def on_start(self, worker_group: WorkerGroup, backend_config: MyFrameworkConfig) -> None:
        ranks = worker_group.rendezvous()  # rank 0's node address and a free port, every rank's ranks
        worker_group.set_env([r.env() for r in ranks])  # TODO: or drop, if the framework reads no env
        worker_group.execute_per_rank(_join, [(r.master_addr, r.master_port, r.world_rank, r.world_size,
                                               backend_config.timeout_s) for r in ranks])

    def on_shutdown(self, worker_group: WorkerGroup, backend_config: MyFrameworkConfig) -> None:
        worker_group.execute(_leave)
