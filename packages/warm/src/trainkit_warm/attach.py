"""A driver attaches to the warm cluster instead of starting Ray (``trainkit_attach_cluster``)."""

from __future__ import annotations

import logging
import os
from typing import Any

from trainkit._internal.cluster import ray_private, ray_runtime
from trainkit.runtime import AttachedCluster
from trainkit_warm import record

VITAL = ("gcs_server", "raylet")  # Ray's process types without which the cluster is gone


def cluster_to_attach() -> str | None:
    """The warm cluster's address if a driver would attach to it now (quietly: no note why not)."""
    found = record.attachable(quiet=True)
    return found["address"] if found is not None else None


def attach(ray_init_kwargs: dict[str, Any]) -> AttachedCluster | None:
    """Connect to the warm cluster if it is up and usable (``record.attachable``); None otherwise
    (nothing left connected), and core starts the embedded cluster."""
    with record.attach_lock():  # shared from the look at the record until connected (the idle stop waits)
        found = record.attachable()
        return _connect(found, ray_init_kwargs) if found is not None else None


def _connect(found: dict[str, Any], ray_init_kwargs: dict[str, Any]) -> AttachedCluster | None:
    import ray

    if found.get("auth_mode") == "token" and not os.environ.get("RAY_AUTH_MODE"):
        ray_private.turn_token_auth_on()  # Ray turns it on by itself only for a cluster it finds, not for an address given
    try:
        with ray_runtime.loopback_connection():
            ray.init(address=found["address"], _node_ip_address="127.0.0.1", **ray_init_kwargs)
    except Exception as exc:  # noqa: BLE001 - the cluster went away between the check and here
        logging.getLogger(__name__).debug("warm cluster %s unusable: %s", found.get("address"), exc)
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001
            pass
        return None
    vital = {kind: (int(pid), str(started)) for kind, (pid, started) in found.get("processes", {}).items()
             if kind in VITAL and started}
    record.touch()
    return AttachedCluster(address=found["address"], kind="warm", down=lambda: _down(vital))


def _down(vital: dict[str, tuple[int, str]]) -> str | None:
    """Which of the warm cluster's GCS and raylet (pid, start time) ended, or None while both run."""
    for kind, (pid, started) in vital.items():
        if not record.same_process(pid, started):
            return f"the warm Ray cluster's {kind} (pid {pid}) ended (`trainkit down`, or its keeper died)"
    return None
