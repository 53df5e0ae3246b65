"""Named points where the reliability tests SIGKILL a process, mid-protocol.

``TRAINKIT_FAULT_POINT="before_rename"`` kills the driver just before a checkpoint directory is
renamed; ``"upload_file:rank=1:attempt=0"`` kills rank 1 of attempt 0 after it uploaded a file.
``TRAINKIT_FAULT_SIGNAL=SIGINT`` (or SIGTERM) sends that signal instead of SIGKILL (a Ctrl-C or a stop
signal at that point).
With ``TRAINKIT_FAULT_HOLD=<dir>`` the point holds instead of killing: it creates ``<dir>/held``
and waits until ``<dir>/release`` exists (a writer cut off mid-upload, released when the test says).
Unset (always, outside tests), a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time


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
    if hold := os.environ.get("TRAINKIT_FAULT_HOLD"):
        open(os.path.join(hold, "held"), "w").close()
        while not os.path.exists(os.path.join(hold, "release")):
            time.sleep(0.05)
        return
    os.kill(os.getpid(), signal.Signals[os.environ.get("TRAINKIT_FAULT_SIGNAL", "SIGKILL")])
