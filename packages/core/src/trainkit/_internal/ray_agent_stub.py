"""Stands in for Ray's dashboard agent on the embedded cluster (see ``ray_runtime._lean_raylet``).

The raylet starts it in place of ``ray/dashboard/agent.py`` and fate-shares with it, so it stays up
until its raylet is gone. It does nothing else: the ports Ray's agent would report are written as
"not in use" before the raylet starts. Run with ``python -S`` (no site-packages): it imports nothing.
"""

import os
import time

if __name__ == "__main__":
    raylet = os.getppid()
    while os.getppid() == raylet:  # reparented: the raylet died without stopping its agents
        time.sleep(1.0)
