"""Connect to Ray: an existing cluster (``RAY_ADDRESS`` or an earlier ``ray.init``) or an embedded,
quiet, loopback-only local one. Ray turns token authentication on for a new local cluster by
default; trainkit keeps that and only silences the notice."""

from __future__ import annotations

import logging
import os


def ensure_ray() -> None:
    import ray

    if ray.is_initialized():
        return
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False, "namespace": "trainkit"}
    if os.environ.get("RAY_ADDRESS"):
        ray.init(**quiet)
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = notice.level
    notice.setLevel(logging.ERROR)
    try:
        ray.init(include_dashboard=False, _node_ip_address="127.0.0.1", **quiet)
    finally:
        notice.setLevel(level)
