"""Every hook a trainkit plugin can implement.

Two kinds of plugin implement them: framework plugins (entry-point group ``trainkit.plugins``: a
backend, its checks and accelerators) and runtime plugins (group ``trainkit.runtimes``: where and
how a run's driver and workers start, e.g. ``trainkit-warm``'s cluster that outlives one driver).
Core calls the runtime hooks without knowing any runtime plugin: with none installed, ``fit()`` runs
in its own process on the embedded cluster (or ``RAY_ADDRESS``'s), as before.

Plugins mark implementations with ``trainkit.hookimpl`` (never import pluggy themselves). Hooks are
called with keyword arguments, so an implementation may accept any subset of a spec's arguments
and new arguments never break old plugins. Each docstring says where the hook runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import pluggy

if TYPE_CHECKING:
    import argparse

    from trainkit.backend import BackendConfig, BackendRegistry, WorkerGroup
    from trainkit.config import ScalingConfig
    from trainkit.result import Result
    from trainkit.runtime import AttachedCluster

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


# -- runtimes (entry-point group ``trainkit.runtimes``) -------------------------------------------
# Each is ``firstresult``: the first plugin that returns something other than None decides.

@hookspec(firstresult=True)
def trainkit_hand_off_fit(run: dict) -> "Result | None":
    """Run the fit elsewhere: return its ``Result`` (or raise its error, or ``SystemExit``), or None
    to leave it to this process. ``run`` holds the ``Controller``'s keyword arguments (``train_fn``,
    ``train_loop_config``, ``backend_config``, ``scaling_config``, ``run_config``, ``datasets``,
    ``validation_config``, ``default_name``). Runs in the driver at ``fit()``, after the input checks
    and before Ray is imported; never for local mode. Once it returned a ``Result`` or raised, the
    fit never runs here."""


@hookspec(firstresult=True)
def trainkit_cluster_to_attach() -> "str | None":
    """The address ``trainkit_attach_cluster`` would connect to now, or None; without connecting
    and without printing. Runs in the driver before Ray is imported (core then starts no fork
    server ahead for an embedded cluster it would not start)."""


@hookspec(firstresult=True)
def trainkit_attach_cluster(ray_init_kwargs: dict) -> "AttachedCluster | None":
    """Connect this process to a cluster of the plugin's (``ray.init(address=..., **ray_init_kwargs)``)
    instead of starting the embedded one, and describe it; None (with nothing left connected): core
    starts the embedded cluster. Runs in the driver when a run first needs Ray, unless Ray is
    connected already or ``RAY_ADDRESS`` is set, under core's lock (one thread at a time)."""


@hookspec(firstresult=True)
def trainkit_claim_workers(count: int, prewarm_modules: "tuple[str, ...]") -> "list | None":
    """Up to ``count`` worker actors started ahead on the attached cluster, each claimed for this
    driver only (a list shorter than ``count``, or None: core starts the rest). Runs in the driver
    when a group of CPU-only workers (at most one CPU each, no runtime_env, no node selectors) starts
    on a cluster ``trainkit_attach_cluster`` attached to."""


@hookspec
def trainkit_cli_commands(subcommands: "argparse._SubParsersAction") -> None:
    """Add ``trainkit`` subcommands: ``subcommands.add_parser(name, ...)``, with
    ``set_defaults(func=handler)`` where ``handler(args) -> int`` is the exit status. A plugin
    must import nothing heavy here (every ``trainkit`` command loads it). Runs in the CLI."""
