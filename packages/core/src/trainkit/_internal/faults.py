"""Named points where the reliability tests SIGKILL a process, mid-protocol.

``TRAINKIT_FAULT_POINT="before_rename"`` kills the driver just before a checkpoint directory is
renamed; ``"upload_file:rank=1:attempt=0"`` kills rank 1 of attempt 0 after it uploaded a file.
``TRAINKIT_FAULT_SIGNAL=SIGTERM`` sends that signal instead of SIGKILL (a stop signal arriving
mid-commit). Unset (always, outside tests), a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal


def point(name: str, **where: int | None) -> None:
    spec = os.environ.get("TRAINKIT_FAULT_POINT")
    if not spec:
        return
    point_name, *conditions = spec.split(":")
    if point_name != name:
        return
    for condition in conditions:
        key, _, value = condition.partition("=")
        if where.get(key) is None or str(where[key]) != value:
            return
    os.kill(os.getpid(), signal.Signals[os.environ.get("TRAINKIT_FAULT_SIGNAL", "SIGKILL")])
