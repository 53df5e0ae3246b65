"""``RunConfig.worker_runtime_env`` as the worker actors' Ray ``runtime_env``.

Ray takes only URIs in an actor's ``working_dir`` (a local directory is uploaded by ``ray.init`` for a
whole job): a local one is packed and uploaded to the cluster here, once per fit, as ``ray.init``
does with a job's, and the workers get its ``gcs://`` URI.
"""

from __future__ import annotations

import json
import logging
from typing import Any

logger = logging.getLogger("trainkit")


def for_workers(env: dict[str, Any] | None) -> dict[str, Any] | None:
    """The runtime_env the worker actors start with (Ray must be initialized); None for none."""
    if not env:
        return None
    env = dict(env)
    working_dir = env.get("working_dir")
    if working_dir is not None and "://" not in working_dir:
        from trainkit._internal.cluster.ray_private import upload_working_dir

        env = upload_working_dir(env, logger)
    env.pop("excludes", None)  # of the upload only
    return env


def key(env: dict[str, Any] | None) -> str:
    """A stable text of ``env``: spare workers started with one serve only groups with the same."""
    return json.dumps(env, sort_keys=True) if env else ""
