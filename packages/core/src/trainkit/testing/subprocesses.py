"""Processes a test starts (a driver, ``trainkit launch``, an example script): each in a session of
its own, with SIGINT, SIGTERM and SIGHUP at their defaults and no signal blocked, whatever the test
process inherited (a CI job
started in the background has SIGINT ignored, and a child would ignore it too), and ended together
with everything it started (its Ray session: GCS, raylet, workers) however the test ends.

    start(args, **popen_kwargs)      a ``subprocess.Popen``; end it with ``end(proc)``
    run(args, timeout=..., ...)      ``subprocess.run``'s signature; the process group is ended
                                     before it returns or raises (a timeout leaves nothing behind)
    processes                        fixture: ``processes.start(...)`` is ended when the test ends,
                                     failed or not; ``processes.run`` is ``run``
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any, Iterator

import pytest

_DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _default_signals() -> None:
    # runs in the child between fork and exec, as Ray's own services do (ray/_private/services.py)
    for sig in _DEFAULT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # a test runner's thread may block some


def start(args: Any, **popen_kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen(args, **popen_kwargs)`` in a new session (its own process group), with
    SIGINT, SIGTERM and SIGHUP at their defaults and an empty signal mask."""
    return subprocess.Popen(args, start_new_session=True, preexec_fn=_default_signals, **popen_kwargs)


def _kill(proc: subprocess.Popen) -> list:
    """SIGKILL to ``proc``'s process group and to every process descended from it (one that left
    the group too); returns those descendants."""
    import psutil

    try:
        descendants = psutil.Process(proc.pid).children(recursive=True) if proc.poll() is None else []
    except psutil.NoSuchProcess:
        descendants = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start() made proc the leader: its group id is its pid
    except (ProcessLookupError, PermissionError):  # the group is empty already
        pass
    for process in descendants:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    return descendants


def end(proc: subprocess.Popen) -> None:
    """Kills ``proc``, its process group and its descendants, reaps them and closes its pipes:
    nothing is left of what it started."""
    import psutil

    descendants = _kill(proc)
    proc.wait()
    psutil.wait_procs(descendants, timeout=30)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream:
            stream.close()


def run(args: Any, *, input: Any = None, capture_output: bool = False, timeout: float | None = None,
        check: bool = False, **popen_kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run`` through ``start``: on a timeout (``subprocess.TimeoutExpired``, with the
    output so far), an exception or a normal exit, the process group is ended before it returns.
    Not for a command that leaves daemons running on purpose (``ray start``): they end with it."""
    if capture_output:
        popen_kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        popen_kwargs["stdin"] = subprocess.PIPE
    proc = start(args, **popen_kwargs)
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        stdout, stderr = proc.communicate()  # what it wrote until then: the error shows it
        raise subprocess.TimeoutExpired(args, timeout, stdout, stderr) from None
    finally:
        end(proc)
    done = subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)
    if check:
        done.check_returncode()
    return done


class Processes:
    """What the ``processes`` fixture gives: ``start`` registers each process for the test's end."""

    run = staticmethod(run)

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []

    def start(self, args: Any, **popen_kwargs: Any) -> subprocess.Popen:
        proc = start(args, **popen_kwargs)
        self.started.append(proc)
        return proc


@pytest.fixture
def processes() -> Iterator[Processes]:
    """``processes.start(args, **popen_kwargs)``: a ``Popen`` as ``start`` makes it, ended with its
    process group and Ray session when the test ends, whether it passed or failed."""
    started = Processes()
    yield started
    for proc in started.started:
        end(proc)
