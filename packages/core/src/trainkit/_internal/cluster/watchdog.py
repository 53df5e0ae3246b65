"""Reaps an embedded Ray cluster whose driver died without stopping it (SIGKILL, OOM kill).

Ray ties its GCS and raylet to the driver's life, but the raylet's own children (its agents) can
outlive them for a long while. The watchdog is a separate small process, reading a pipe from the
driver: while the pipe is open it records the process tree under the cluster's root processes;
when the pipe closes (the driver is gone, however it went) it SIGKILLs whatever of that tree is
still alive. Standard library only, Linux only (it reads /proc).

A process is known by its pid and its start time, never by its pid alone: once a root ends (Ray's
``ray.shutdown()`` stops the cluster while its watchdog waits for the driver's exit), the kernel
hands its pid to some other process, soon where pids are few (32768 on many machines), and that
process and its children are none of the watchdog's business.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

_watchdog: subprocess.Popen | None = None


def start(root_pids: list[int]) -> None:
    """Start watching the trees under ``root_pids`` until this process exits (or the next
    ``start``: one watchdog per process, the previous cluster's ends with its cluster)."""
    global _watchdog
    if not os.path.isdir("/proc") or not root_pids:
        return
    stop()  # the user's ray.shutdown() stopped the cluster it watched
    # Known here, where the roots are children not yet reaped: their pids are still theirs.
    roots = [f"{pid}:{started}" for pid, started in identities(root_pids).items()]
    _watchdog = subprocess.Popen([sys.executable, __file__, *roots], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def stop() -> None:
    """The cluster was stopped normally: let the watchdog sweep stragglers and exit."""
    global _watchdog
    if _watchdog is not None:
        _watchdog.stdin.close()
        try:
            _watchdog.wait(timeout=5)  # reaped: no zombie left behind
        except subprocess.TimeoutExpired:
            pass
        _watchdog = None


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, start time) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[19]
    except (OSError, IndexError, ValueError):
        return None


def identities(pids: list[int]) -> dict[int, str]:
    """pid -> start time of those of ``pids`` that exist (a zombie too)."""
    return {pid: stat[1] for pid in pids if (stat := _stat(pid))}


def tree(roots: dict[int, str]) -> dict[int, str]:
    """pid -> start time of ``roots`` (pid -> start time) and their descendants; a root whose pid
    now names another process is left out, and so are that process's children."""
    children: dict[int, list[int]] = {}
    starts: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))):
            children.setdefault(stat[0], []).append(int(entry))
            starts[int(entry)] = stat[1]
    found, todo = {}, [pid for pid, started in roots.items() if starts.get(pid) == started]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = starts[pid]
            todo.extend(children.get(pid, []))
    return found


def _main(roots: dict[int, str]) -> None:
    known = tree(roots)  # the agents exist already: Ray starts them before ray.init returns
    while True:
        readable, _, _ = select.select([sys.stdin], [], [], 0.5)
        eof = readable and not os.read(sys.stdin.fileno(), 1024)  # the driver closed the pipe or died
        known.update(tree(roots))
        if eof:
            break
    for pid, started in known.items():
        stat = _stat(pid)
        if stat is not None and stat[1] == started:  # the same process, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


if __name__ == "__main__":
    _main({int(pid): started for pid, started in (arg.split(":") for arg in sys.argv[1:])})
