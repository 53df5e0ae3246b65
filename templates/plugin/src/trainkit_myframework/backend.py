"""``MyFrameworkBackend``: sets MyFramework's communication up on the workers and tears it down.
Methods run in the driver; the functions they pass to ``worker_group.execute`` run on every worker."""

from __future__ import annotations

import trainkit
from trainkit import Backend

from trainkit_myframework.config import MyFrameworkConfig


def _join(address: tuple[str, int], timeout_s: float) -> None:
    import myframework  # TODO: the framework's own initialization

    ctx = trainkit.get_context()
    myframework.init(rank=ctx.get_world_rank(), world_size=ctx.get_world_size(), address=address, timeout=timeout_s)


def _leave() -> None:
    import myframework  # TODO: release what _join set up, so a new attempt can join again

    myframework.shutdown()


class MyFrameworkBackend(Backend):
    def on_start(self, worker_group, backend_config: MyFrameworkConfig) -> None:
        address = worker_group.free_address(0)  # rank 0 hosts the rendezvous
        worker_group.execute(_join, address, backend_config.timeout_s)

    def on_shutdown(self, worker_group, backend_config: MyFrameworkConfig) -> None:
        worker_group.execute(_leave)
