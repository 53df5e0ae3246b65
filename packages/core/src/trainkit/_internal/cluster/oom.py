"""Whether the kernel's out-of-memory killer ended a process: its own words, from its log.

The kernel logs each OOM kill it makes ("Memory cgroup out of memory: Killed process 4242 (ray::...)",
or an ``oom-kill:...,pid=4242,...`` line), whether a cgroup's limit or the machine's memory ran out.
The log (``/dev/kmsg``) is read on the dead process's node; where it cannot be read (no privilege:
``kernel.dmesg_restrict``) there is no evidence, and the caller says what it knows without it.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Any

KMSG = "/dev/kmsg"


def oom_kill_line(pid: int) -> str | None:
    """The kernel's line about killing process ``pid`` for lack of memory; "" when its log holds
    none; None when the log cannot be read."""
    killed = re.compile(rf"(Killed process {pid}\b|oom-kill:.*\bpid={pid}\b)")
    try:
        fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    found = ""
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:  # the end of the log
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten while reading: go on with the next
                    continue
                break
            if not record:
                break
            text = record.decode(errors="replace").split(";", 1)[-1].split("\n", 1)[0].strip()
            if killed.search(text) and (not found or "Killed process" in text):
                found = text
    finally:
        os.close(fd)
    return found


def oom_evidence(node_id: str, pid: int) -> str | None:
    """``oom_kill_line(pid)`` read on the node ``node_id`` (this process's own, or a task placed
    there); None when the node cannot be asked."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        if node_id == ray.get_runtime_context().get_node_id():
            return oom_kill_line(pid)
        task: Any = ray.remote(num_cpus=0, max_retries=0)(oom_kill_line).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
        return ray.get(task.remote(pid), timeout=30)
    except Exception:  # noqa: BLE001 - evidence is a bonus: without it the message says what is known
        return None
