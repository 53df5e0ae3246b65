"""What a framework plugin provides: a ``BackendConfig`` dataclass and a ``Backend``.

Core calls the backend in the driver around the worker group's life; the backend acts on the
workers through the ``WorkerGroup`` it is handed (never through Ray actors). Every method is a
no-op by default, so a backend overrides only what its framework needs.

Example (a framework that needs a coordinator address and its rank on every worker)::

    @dataclass
    class MyConfig(BackendConfig):
        timeout_s: float = 300

        def __post_init__(self):
            check_positive("timeout_s", self.timeout_s)   # from trainkit.validation

        @property
        def backend_cls(self):
            from my_plugin.backend import MyBackend   # the framework is imported only here
            return MyBackend

    class MyBackend(Backend):
        def on_start(self, worker_group, backend_config):
            ranks = worker_group.rendezvous()               # rank 0's node address, a free port, ranks
            worker_group.set_env([r.env() for r in ranks])  # MASTER_ADDR, RANK, ...; undone at teardown
            worker_group.execute_per_rank(init_my_framework,
                                          [(r.master_addr, r.master_port, r.world_rank) for r in ranks])
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, ContextManager, Mapping, Protocol, Sequence

from trainkit._internal.cluster.net import interface_of, release_port, take_listening_socket

__all__ = ["Backend", "BackendConfig", "BackendRegistry", "Rendezvous", "WorkerGroup", "WorkerInfo", "interface_of",
           "release_port", "take_listening_socket"]


@dataclass(frozen=True)
class WorkerInfo:
    """One rank of a worker group: where it runs and its ranks."""

    actor: Any  # the Ray actor: core's; a backend uses the group's methods instead
    world_rank: int
    local_rank: int
    local_world_size: int  # ranks on this rank's node
    node_rank: int
    node_id: str
    ip: str
    pid: int
    accelerator_ids: dict[str, list[str]]


@dataclass(frozen=True)
class Rendezvous:
    """What one rank needs to join a framework's group: the address and a free port on rank 0's node
    (127.0.0.1 when the whole group is on one node), its ranks and the sizes."""

    master_addr: str
    master_port: int
    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    num_nodes: int

    def env(self) -> dict[str, str]:
        """torchrun's variables for this rank, as most frameworks read them."""
        return {"MASTER_ADDR": self.master_addr, "MASTER_PORT": str(self.master_port),
                "RANK": str(self.world_rank), "WORLD_SIZE": str(self.world_size),
                "LOCAL_RANK": str(self.local_rank), "LOCAL_WORLD_SIZE": str(self.local_world_size),
                "NODE_RANK": str(self.node_rank), "GROUP_RANK": str(self.node_rank),
                "GROUP_WORLD_SIZE": str(self.num_nodes)}


class BackendRegistry(Protocol):
    """What a plugin's ``trainkit_register_backends`` hook registers its backends with."""

    def register(self, name: str, config_cls: type, trainer_cls: type | None = None) -> None:
        """Backend ``name``: its ``BackendConfig`` subclass and, optionally, its Trainer. ``name`` is
        the plugin's entry-point name, or starts with it and ``_``."""


class WorkerGroup(Protocol):
    """The workers of one attempt, as a ``Backend`` sees them. Each attempt gets fresh worker
    processes. Functions run in the worker process (not the training thread) and travel pickled:
    define them at module level."""

    workers: Sequence[WorkerInfo]  #: in rank order

    def __len__(self) -> int: ...

    def execute(self, fn: Callable, *args: Any, **kwargs: Any) -> list[Any]:
        """``fn(*args, **kwargs)`` on every rank in parallel; results in rank order."""

    def execute_single(self, rank: int, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on one rank."""

    def execute_per_rank(self, fn: Callable, args_per_rank: Sequence[Sequence[Any]]) -> list[Any]:
        """``fn(*args_per_rank[r])`` on every rank r in parallel; results in rank order."""

    def set_env(self, env: Mapping[str, str] | Sequence[Mapping[str, str]]) -> None:
        """Set environment variables on every rank (one mapping for all, or one per rank); the
        previous values come back when the group shuts down after ``on_shutdown``."""

    def rendezvous(self, listen: bool = False) -> list[Rendezvous]:
        """Every rank's ``Rendezvous``, in rank order, with a port on rank 0's node. ``listen=True``:
        rank 0's worker process binds that port first and holds it listening; the framework's server
        on rank 0 takes it with ``take_listening_socket(port)`` (no other process can take the port
        in between). Else the port is free now, for a framework that binds it itself."""

    def node_address(self, rank: int = 0) -> str:
        """The host other ranks reach ``rank``'s node at (127.0.0.1 when the group is on one node),
        for a framework server that binds a port of its own choosing (port 0) and publishes it."""

    def free_address(self, rank: int = 0, hold: bool = False) -> tuple[str, int]:
        """The host other ranks reach ``rank``'s node at and a TCP port there. Free now, so a
        framework that binds it later may find it taken in between (seen in CI under load); with
        ``hold=True`` rank's worker process holds the port (bound, not listening, SO_REUSEADDR)
        until ``release_port(port)`` there or the worker's end: a server that sets SO_REUSEADDR
        (gRPC's, asyncio's, ``socket.create_server``) binds beside the hold; one that does not
        calls ``release_port(port)`` on that rank just before it binds."""

    def free_ports(self, count: int = 1, hold: bool = False) -> list[tuple[str, list[int]]]:
        """For every rank: the host others reach it at and ``count`` ports there, none offered
        twice on one host (for frameworks where every worker listens); ``hold`` as in
        ``free_address``."""


class Backend:
    """Framework setup and teardown on a worker group; every method runs in the driver."""

    def on_start(self, worker_group: "WorkerGroup", backend_config: "BackendConfig") -> None:
        """Workers are up; set up the framework's communication (process group, TF_CONFIG, ...)."""

    def on_training_start(self, worker_group: "WorkerGroup", backend_config: "BackendConfig") -> None:
        """Just before the training function starts on every worker."""

    def on_shutdown(self, worker_group: "WorkerGroup", backend_config: "BackendConfig") -> None:
        """The training function ended on every worker; release what ``on_start`` set up."""

    def on_abort(self, worker_group: "WorkerGroup", backend_config: "BackendConfig") -> None:
        """The attempt ends before the training function ended on every worker (a rank failed or
        hung, the driver was interrupted, an elastic resize): the workers are killed once this
        returns. Stop gracefully what must not die by SIGKILL, e.g. processes the workers started."""

    def on_local_start(self, backend_config: "BackendConfig") -> None:
        """Local mode (``num_workers=0``): set up in the driver process, e.g. join an outer launcher."""

    def on_local_shutdown(self, backend_config: "BackendConfig") -> None:
        """Local mode: release what ``on_local_start`` set up; runs after a failed attempt too."""


@dataclass
class BackendConfig:
    """Framework settings; subclasses are dataclasses and name their backend in ``backend_cls``."""

    #: Modules every worker starts importing the moment its process is up, while the driver is
    #: still placing and wiring the group (e.g. ``("torch", "torch.distributed")``).
    prewarm_modules: ClassVar[tuple[str, ...]] = ()

    #: The fork contract, part one: True where the framework is safe to fork once ``prewarm_modules``
    #: are imported (the import leaves no thread, device or socket a child would share). Then the
    #: embedded cluster's workers, and ``trainkit launch``'s scripts, start forked from one process
    #: that imported them once for all (``cluster/forkserver.py``), with ``OMP_NUM_THREADS=1`` where
    #: the driver sets none. False (the default): each worker is a fresh interpreter.
    fork_safe: ClassVar[bool] = False

    @classmethod
    def after_fork(cls, loaded_env: Mapping[str, str]) -> None:
        """The fork contract, part two: in each child forked from the process that imported
        ``prewarm_modules`` with the environment ``loaded_env``, before the user's code runs (a
        worker: before the training function; a script: before its first line). Redo what the
        framework sized from that environment where the child's own differs (``os.environ``, e.g.
        ``OMP_NUM_THREADS``, which Ray sets per worker), and what a fresh process would have that a
        fork lacks. Default: nothing (a plugin still setting the deprecated ``follow_thread_count``
        gets it called with the thread counts)."""
        follow = cls.follow_thread_count
        loaded, now = loaded_env.get("OMP_NUM_THREADS", ""), os.environ.get("OMP_NUM_THREADS", "")
        if follow is not None and loaded != now and loaded.isdigit() and now.isdigit():
            follow(int(loaded), int(now))

    #: Deprecated (use ``fork_safe`` and ``after_fork``): set, ``fork_safe``, and a forked worker
    #: whose ``OMP_NUM_THREADS`` differs from the one its framework loaded with calls it with both.
    follow_thread_count: ClassVar[Callable[[int, int], None] | None] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("follow_thread_count") is not None:
            warnings.warn(f"{cls.__qualname__}.follow_thread_count is deprecated: set fork_safe = True and "
                          "override after_fork(loaded_env) (docs/extending.md, the fork contract)",
                          DeprecationWarning, stacklevel=2)
            cls.fork_safe = True

    @property
    def backend_cls(self) -> type[Backend]:
        return Backend

    def train_fn_context(self) -> ContextManager[object]:
        """Entered on every worker around the training function, in the thread that runs it (and
        around it in local mode): for framework state that lives with the training thread, such as
        XGBoost's communicator. Runs after ``Backend.on_training_start``. Default: nothing."""
        return contextlib.nullcontext()

    #: The name ``registry.register`` gave this class's backend (set by the registry).
    _registered_name: ClassVar[str | None] = None

    @property
    def name(self) -> str:
        """Shown in progress and run state: the registered backend name, else the class's name
        without ``Config``."""
        return self._registered_name or type(self).__name__.removesuffix("Config").lower() or "python"
