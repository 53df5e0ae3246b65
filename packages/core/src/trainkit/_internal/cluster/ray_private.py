"""Every read of Ray's private modules (``ray._private``, ``ray._raylet``), in one place.

Each is guarded: on a Ray release that moved what it reads, the function gives its stated fallback
(None, an empty answer, or Ray's public equivalent), never an AttributeError in a user's run. What
trainkit *changes* in Ray lives in ``ray_patches.py``. This module imports nothing of trainkit: a
worker's entry script (``ray_worker_main.py``) loads it by its path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def global_node() -> Any | None:
    """This process's Ray node object while connected (the embedded cluster's node where this
    process started it), else None."""
    worker = _module("ray._private.worker")
    return getattr(worker, "_global_node", None) if worker is not None else None


def node_processes(node: Any) -> dict[str, list[Any]]:
    """The processes a node object started: Ray's process type -> [info with ``.process``] ({} for none)."""
    processes = getattr(node, "all_processes", None)
    return processes if isinstance(processes, dict) else {}


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Node id -> the resources free on it now. Fallback (a Ray without the call): each live node's
    total resources (an elastic run then sizes as if the cluster were idle, and placement decides)."""
    import ray

    state = _module("ray._private.state")
    if state is not None and callable(getattr(state, "available_resources_per_node", None)):
        return state.available_resources_per_node()
    return {node["NodeID"]: dict(node.get("Resources", {})) for node in ray.nodes() if node.get("Alive")}


def node_registered(gcs_address: str) -> Any:
    """A function ``(node_id) -> bool``: whether the GCS at ``gcs_address`` lists that node yet.
    Raises where this Ray's internals moved (the caller then waits Ray's own way)."""
    from ray._private import services, state

    table = state.GlobalState()
    table._initialize_global_state(services._get_gcs_client_options(gcs_address))
    return lambda node_id: any(node.get("NodeID") == node_id for node in table.node_table())


def draining_nodes() -> dict[str, int]:
    """Ray's draining nodes: node id -> deadline (UNIX ms, 0: none). Fallback: {} (no drain seen)."""
    state = _module("ray._private.state")
    get = getattr(getattr(state, "state", None), "get_draining_nodes", None)
    return (get() or {}) if callable(get) else {}


def upload_working_dir(env: dict[str, Any], logger: Any) -> dict[str, Any]:
    """``env`` with its local ``working_dir`` packed and uploaded to the cluster (a ``gcs://`` URI), as
    ``ray.init`` does for a job's. A Ray without that call: ``env`` as it is (Ray then says a local
    directory is not supported in an actor's runtime_env)."""
    worker = _module("ray._private.worker")
    working_dir = _module("ray._private.runtime_env.working_dir")
    upload = getattr(working_dir, "upload_working_dir_if_needed", None)
    if worker is None or upload is None:
        return env
    include_gitignore = os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"
    return upload(env, include_gitignore=include_gitignore,
                  scratch_dir=worker.global_worker.node.get_runtime_env_dir_path(), logger=logger)


def token_auth() -> tuple[Path, Any] | None:
    """(where Ray keeps this user's auth token, a function that makes a new one), or None on a Ray
    release without token authentication."""
    generator = _module("ray._private.authentication.authentication_token_generator")
    setup = _module("ray._private.authentication.authentication_token_setup")
    make = getattr(generator, "generate_new_authentication_token", None)
    path = getattr(setup, "_get_default_token_path", None)
    return (path(), make) if callable(make) and callable(path) else None


def turn_token_auth_on() -> None:
    """Token authentication for this process with this user's token, as ``ray.init`` turns it on for
    a new local cluster (it does not for an address given). A Ray without it: nothing to do."""
    setup = _module("ray._private.authentication.authentication_token_setup")
    if callable(enable := getattr(setup, "_enable_token_auth", None)):
        enable()


TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"  # says a token was made


def default_worker_path() -> str:
    """Ray's own Python worker entry script."""
    import ray._private.workers

    return os.path.join(os.path.dirname(ray._private.workers.__file__), "default_worker.py")


def jobs() -> dict[Any, Any]:
    """Ray's job table (each job's ``driver_pid``, ``is_dead``); {} where this Ray cannot give it."""
    worker = _module("ray._private.worker")
    client = getattr(getattr(worker, "global_worker", None), "gcs_client", None)
    try:
        return client.get_all_job_info(skip_submission_job_info_field=True, skip_is_running_tasks_field=True)
    except Exception:  # noqa: BLE001 - no client, or Ray's call moved
        return {}


def _module(name: str) -> Any | None:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        return None
