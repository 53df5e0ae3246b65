"""Every read of a Ray private (``ray._private``) trainkit-warm makes, in one place: core's boundary
with Ray's internals (``trainkit._internal.cluster.ray_runtime``) may take them in later. Each is
called with Ray imported and, except ``single_machine_mode``/``token_auth_on``, connected."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator


def this_node() -> Any:
    """This process's node object (its GCS address, session directory and processes)."""
    import ray

    return ray._private.worker._global_node


def cluster_processes() -> dict[str, list[int]]:
    """The pids of the cluster's processes this process started, by Ray's kind (gcs_server, raylet, ...)."""
    processes = getattr(this_node(), "all_processes", None) or {}
    return {kind: [info.process.pid for info in infos] for kind, infos in processes.items()}


def jobs() -> dict[Any, Any]:
    """Ray's job table (each job's ``driver_pid``, ``is_dead``); {} where Ray's internals moved."""
    import ray

    try:
        return ray._private.worker.global_worker.gcs_client.get_all_job_info(
            skip_submission_job_info_field=True, skip_is_running_tasks_field=True)
    except Exception:  # noqa: BLE001 - the used-file alone then counts
        return {}


@contextlib.contextmanager
def single_machine_mode() -> Iterator[None]:
    """Ray's single-machine flag on while connecting: 127.0.0.1 stays 127.0.0.1 (not the machine's
    IP), and Ray's token-setup notice silenced."""
    import ray

    flag = ray._private.ray_constants.ENABLE_RAY_CLUSTER
    ray._private.ray_constants.ENABLE_RAY_CLUSTER = False
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = notice.level
    notice.setLevel(logging.ERROR)
    try:
        yield
    finally:
        notice.setLevel(level)
        ray._private.ray_constants.ENABLE_RAY_CLUSTER = flag


def token_auth_on() -> None:
    """Token authentication for this process, with this user's token (``~/.ray/auth_token``, the
    one the keeper started with), as Ray's ``ray.init`` does for a new local cluster."""
    try:
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
    except ImportError:  # a Ray release without token authentication
        return
    _enable_token_auth()
