"""A process's Unix state as trainkit's helper processes set it: signals as a shell (or a fresh
interpreter) leaves them, death with the parent, a private Unix socket put in place once it listens."""

from __future__ import annotations

import os
import signal
import socket
import sys


def listen_at(address: str, backlog: int) -> tuple[socket.socket, int]:
    """A Unix socket listening at ``address`` (0600), put in place only once it listens (a dead
    listener's goes), and its inode (whether ``address`` is still this socket)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = f"{address}.{os.getpid()}"
    old_umask = os.umask(0o177)
    try:
        listener.bind(bound)
    finally:
        os.umask(old_umask)
    listener.listen(backlog)
    os.replace(bound, address)
    return listener, os.stat(address).st_ino


def die_with_parent(on: bool = True) -> None:
    """SIGKILL when the parent (the thread that started this process) ends (Linux); ``on=False``:
    no longer."""
    import ctypes

    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL if on else 0)  # PR_SET_PDEATHSIG


def default_signals() -> None:
    """The signal state a shell gives a process: nothing blocked, every disposition the default
    (Ray's processes block SIGINT, and a blocked or ignored signal outlives exec)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for signum in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):  # one the C library keeps for itself
            pass


def fresh_signals() -> None:
    """A fresh interpreter's signal state: a shell's, then what Python's start sets."""
    default_signals()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

