"""``breakpoint()`` in a rank: pdb in the terminal that started the run.

The driver sets ``PYTHONBREAKPOINT`` to ``breakpoint_hook`` in its workers (and so in the scripts of
``trainkit launch``, which inherit their worker's environment). The hook opens a pdb whose input and
output travel over an authenticated connection to the driver's relay (``debug_relay``), which lends
it the driver's terminal, one session at a time: a second rank's ``breakpoint()`` waits until the
first session ends. A session ends at ``continue`` or ``quit``; a later stop (a breakpoint set with
``b``, another ``breakpoint()``) opens a new one. While it is open the process's ``sys.stdin``,
``sys.stdout`` and ``sys.stderr`` are the session's too, as they would be under a local pdb.

Off a terminal (the driver's stdin is not a tty) the relay's address is empty: the hook warns,
naming the rank, and returns.
"""

from __future__ import annotations

import io
import os
import pdb
import socket
import sys
from multiprocessing.connection import AuthenticationError, Connection, answer_challenge, deliver_challenge
from typing import Any

HOOK = "trainkit._internal.worker.debugger.breakpoint_hook"
ADDRESS_ENV = "TRAINKIT_DEBUG_ADDRESS"  # host:port of the driver's relay; empty: the driver has no terminal
KEY_ENV = "TRAINKIT_DEBUG_KEY"  # the relay's authentication key, hex
RAYS_HOOKS = ("ray.util.rpdb.set_trace", "ray.util.rpdb._driver_set_trace")  # what ray.init() sets


def rank_name() -> str:
    return f"rank {os.environ.get('TRAINKIT_RANK', '0')}"


def breakpoint_hook(*args: Any, **kwargs: Any) -> None:
    """``sys.breakpointhook`` of a rank (arguments, as pdb's ``set_trace``, are ignored)."""
    address = os.environ.get(ADDRESS_ENV)
    if not address:
        warn_no_terminal(stacklevel=3)
        return
    host, port = address.rsplit(":", 1)
    session = Session((host, int(port)), bytes.fromhex(os.environ[KEY_ENV]))
    RankPdb(session, stdin=session, stdout=session).set_trace(sys._getframe(1))


def warn_no_terminal(stacklevel: int) -> None:
    from trainkit._internal.display import warn

    warn(f"breakpoint() in {rank_name()} ignored: the run's driver has no terminal (its stdin is not a tty) "
         "to open pdb in. Start the run from a terminal to debug it, or set PYTHONBREAKPOINT=0 in the "
         "driver's environment to silence this", stacklevel=stacklevel)


class Session(io.TextIOBase):
    """pdb's stdin and stdout: lines and text exchanged with the driver's relay while the session is open."""

    def __init__(self, address: tuple[str, int], key: bytes):
        self._address, self._key = address, key
        self._conn: Any = None
        self._streams: tuple[Any, Any, Any] | None = None  # the process's own, while the session has them

    def begin(self) -> bool:
        """Wait until the driver lends this rank its terminal; False when the relay is gone."""
        if self._conn is not None:
            return True
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # what the rank printed before the stop goes first
        try:
            self._conn = Connection(socket.create_connection(self._address).detach())
            answer_challenge(self._conn, self._key)  # the order of multiprocessing's Client()
            deliver_challenge(self._conn, self._key)
            self._conn.send(rank_name())
        except (OSError, EOFError, AuthenticationError):
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            return False
        self._streams = sys.stdin, sys.stdout, sys.stderr
        sys.stdin = sys.stdout = sys.stderr = self
        return True

    def end(self) -> None:
        if self._streams is not None:
            sys.stdin, sys.stdout, sys.stderr = self._streams
            self._streams = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._conn is None:
            return sys.stdout.write(text)
        try:
            self._conn.send(("out", text))
        except OSError:
            self.end()
        return len(text)

    def readline(self, size: int | None = -1) -> str:
        """A line typed in the driver's terminal ("" at its end of input). Should the relay go away
        (the run ends), pdb reads ``continue``: the rank goes on undisturbed."""
        if self._conn is None:
            return "continue\n"
        try:
            self._conn.send(("readline",))
            return self._conn.recv()
        except (OSError, EOFError):
            self.end()
            return "continue\n"


class RankPdb(pdb.Pdb):
    """pdb whose stops take place in ``session`` (``begin()``, then ``end()`` at continue or quit),
    its prompt naming the rank."""

    def __init__(self, session: Any, stdin: Any = None, stdout: Any = None):
        super().__init__(stdin=stdin, stdout=stdout, nosigint=True)
        self.prompt = f"(Pdb {rank_name()}) "
        self._session = session

    def interaction(self, frame: Any, traceback: Any) -> None:
        if self._session.begin():
            super().interaction(frame, traceback)
        else:
            self.set_continue()

    def set_continue(self) -> None:
        super().set_continue()
        self._session.end()

    def set_quit(self) -> None:
        super().set_quit()
        self._session.end()
