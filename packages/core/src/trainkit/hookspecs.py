"""Every hook a trainkit plugin can implement.

Plugins mark implementations with ``trainkit.hookimpl`` (never import pluggy themselves). Hooks are
called with keyword arguments, so an implementation may accept any subset of a spec's arguments
and new arguments never break old plugins. Each docstring says where the hook runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import pluggy

if TYPE_CHECKING:
    from trainkit.backend import BackendConfig, BackendRegistry, WorkerGroup
    from trainkit.callbacks import UserCallback
    from trainkit.config import RunConfig, ScalingConfig
    from trainkit.context import TrainContext

hookspec = pluggy.HookspecMarker("trainkit")
hookimpl = pluggy.HookimplMarker("trainkit")


# -- registration (driver, whenever the plugin registry is built) --------------------------------

@hookspec
def trainkit_register_backends(registry: "BackendRegistry") -> None:
    """Register backends by name: ``registry.register("torch", TorchConfig, TorchTrainer)``.

    Runs in the driver when plugins load. Must not import the framework: pass the config class,
    whose ``backend_cls`` imports it when a run starts.
    """


# -- worker-group lifecycle ------------------------------------------------------------------------

@hookspec
def trainkit_setup_accelerators(worker_group: "WorkerGroup", scaling_config: "ScalingConfig",
                                backend_config: "BackendConfig") -> None:
    """Make accelerators visible on the workers (e.g. share ``CUDA_VISIBLE_DEVICES`` per node).

    Every plugin's implementation sees every run: act only for your own ``backend_config`` types.

    Runs in the driver after the worker group starts and before the backend's ``on_start``;
    use ``worker_group.execute(...)`` to act on the workers.
    """


@hookspec
def trainkit_worker_start(context: "TrainContext") -> None:
    """A worker process joined a run. Runs in every worker, before the backend's ``on_start``."""


@hookspec
def trainkit_worker_stop(context: "TrainContext") -> None:
    """A worker is shutting down cleanly. Runs in every worker, after the backend's ``on_shutdown``;
    a failed attempt's workers are killed without it (each attempt gets fresh processes)."""


@hookspec
def trainkit_default_callbacks(run_config: "RunConfig") -> "list[UserCallback] | None":
    """Callbacks to add to every run, e.g. an organisation's experiment tracking. Runs in the driver
    when a run starts; the callbacks returned run after ``RunConfig.callbacks``, in plugin order."""


@hookspec
def trainkit_check_inputs(train_loop_per_worker: Callable, train_loop_config: "dict | None",
                          datasets: "dict | None") -> None:
    """Refuse inputs a plugin's framework can't use on workers (e.g. objects that must be built
    there), raising ``TypeError`` or ``ValueError`` that names the input. Runs in the driver at
    ``fit()``, before anything starts."""


# -- events (driver) -----------------------------------------------------------------------------------

@hookspec
def trainkit_after_report(run_name: str, index: int, metrics: dict[str, Any],
                          all_metrics: list[dict[str, Any]], checkpoint: Any) -> None:
    """All ranks made report ``index``; ``metrics`` are rank 0's, ``all_metrics`` every rank's,
    ``checkpoint`` the committed ``Checkpoint`` or None. Runs in the driver."""


@hookspec
def trainkit_on_failure(run_name: str, attempt: int, error: BaseException, will_retry: bool) -> None:
    """An attempt failed (a worker raised, died or hung, or the driver failed). Runs in the driver once
    the failure policy decided (``will_retry``), before the next attempt starts."""
