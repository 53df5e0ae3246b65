"""Every hook a trainkit plugin can implement.

Plugins mark implementations with ``trainkit.hookimpl`` (never import pluggy themselves). Hooks are
called with keyword arguments, so an implementation may accept any subset of a spec's arguments
and new arguments never break old plugins. Each docstring says where the hook runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    from trainkit.backend import BackendConfig, BackendRegistry, WorkerGroup
    from trainkit.config import ScalingConfig

hookspec = pluggy.HookspecMarker("trainkit")
hookimpl = pluggy.HookimplMarker("trainkit")


# -- registration (driver, whenever the plugin registry is built) --------------------------------

@hookspec
def trainkit_register_backends(registry: "BackendRegistry") -> None:
    """Register backends by name: ``registry.register("torch", TorchConfig, TorchTrainer)``.

    Runs in the driver when plugins load. Must not import the framework: pass the config class,
    whose ``backend_cls`` imports it when a run starts.
    """


# -- each run (driver) ----------------------------------------------------------------------------

@hookspec
def trainkit_setup_accelerators(worker_group: "WorkerGroup", scaling_config: "ScalingConfig",
                                backend_config: "BackendConfig") -> None:
    """Make accelerators visible on the workers (e.g. share ``CUDA_VISIBLE_DEVICES`` per node).

    Every plugin's implementation sees every run: act only for your own ``backend_config`` types.

    Runs in the driver after the worker group starts and before the backend's ``on_start``;
    use ``worker_group.execute(...)`` to act on the workers.
    """


@hookspec
def trainkit_check_inputs(train_loop_per_worker: Callable, train_loop_config: "dict | None",
                          datasets: "dict | None") -> None:
    """Refuse inputs a plugin's framework can't use on workers (e.g. objects that must be built
    there), raising ``TypeError`` or ``ValueError`` that names the input. Runs in the driver at
    ``fit()``, before anything starts."""
