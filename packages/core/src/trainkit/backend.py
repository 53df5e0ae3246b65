"""What a framework plugin provides: a ``BackendConfig`` dataclass and a ``Backend``.

Core calls the backend in the driver around the worker group's life; the backend acts on the
workers with ``worker_group.execute(fn, ...)`` (every rank) or ``execute_single(rank, fn, ...)``.
Every method is a no-op by default, so a backend overrides only what its framework needs.

Example (a framework that needs a coordinator address on every worker)::

    @dataclass
    class MyConfig(BackendConfig):
        timeout_s: float = 300

        @property
        def backend_cls(self):
            from my_plugin.backend import MyBackend   # the framework is imported only here
            return MyBackend

    class MyBackend(Backend):
        def on_start(self, worker_group, backend_config):
            address = worker_group.execute_single(0, find_free_address)
            worker_group.execute(init_my_framework, address, backend_config.timeout_s)
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, ContextManager

from trainkit._internal.net import interface_of

if TYPE_CHECKING:
    from trainkit._internal.worker_group import WorkerGroup

__all__ = ["Backend", "BackendConfig", "interface_of"]


class Backend:
    """Framework setup and teardown on a worker group; every method runs in the driver."""

    def on_start(self, worker_group: "WorkerGroup", backend_config: "BackendConfig") -> None:
        """Workers are up; set up the framework's communication (process group, TF_CONFIG, ...)."""

    def on_training_start(self, worker_group: "WorkerGroup", backend_config: "BackendConfig") -> None:
        """Just before the training function starts on every worker."""

    def on_shutdown(self, worker_group: "WorkerGroup", backend_config: "BackendConfig") -> None:
        """The training function ended on every worker; release what ``on_start`` set up."""

    def on_local_start(self, backend_config: "BackendConfig") -> None:
        """Local mode (``num_workers=0``): set up in the driver process, e.g. join an outer launcher."""

    def on_local_shutdown(self, backend_config: "BackendConfig") -> None:
        """Local mode: release what ``on_local_start`` set up."""


@dataclass
class BackendConfig:
    """Framework settings; subclasses are dataclasses and name their backend in ``backend_cls``."""

    #: Modules every worker starts importing the moment its process is up, while the driver is
    #: still placing and wiring the group (e.g. ``("torch", "torch.distributed")``).
    prewarm_modules: ClassVar[tuple[str, ...]] = ()

    @property
    def backend_cls(self) -> type[Backend]:
        return Backend

    def train_fn_context(self) -> ContextManager[object]:
        """Entered on every worker around the training function, in the thread that runs it (and
        around it in local mode): for framework state that lives with the training thread, such as
        XGBoost's communicator. Runs after ``Backend.on_training_start``. Default: nothing."""
        return contextlib.nullcontext()

    @property
    def name(self) -> str:
        """Shown in progress and run state."""
        return type(self).__name__.removesuffix("Config").lower() or "python"
