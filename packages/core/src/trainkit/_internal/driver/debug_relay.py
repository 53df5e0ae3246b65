"""The driver's end of the ranks' ``breakpoint()`` (the ranks' end: ``debugger``).

``DebugRelay.env`` is what the workers get: ``PYTHONBREAKPOINT`` naming trainkit's hook and, when
the driver's stdin is a terminal, the address and key of a listener on the driver's node address.
The relay serves one session at a time: a rank connects, the display hands the terminal over
(status line stopped, the run's other output held), the rank's pdb output is written to the
terminal and the lines typed there go back, until the rank's session ends; then the next waiting
rank's begins. A ``PYTHONBREAKPOINT`` the user set in the driver's environment goes to the workers
instead (``0`` turns ``breakpoint()`` off, another value names another debugger).
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import socket
import sys
import threading
from multiprocessing.connection import AuthenticationError, Connection, answer_challenge, deliver_challenge, wait
from typing import Any, Iterator

from trainkit._internal.worker.debugger import ADDRESS_ENV, HOOK, KEY_ENV, RAYS_HOOKS, RankPdb, warn_no_terminal


def users_hook() -> str | None:
    """The driver's own ``PYTHONBREAKPOINT``, unless unset, empty or Ray's (``ray.init()`` sets it)."""
    value = os.environ.get("PYTHONBREAKPOINT")
    return value if value and value not in RAYS_HOOKS else None


@contextlib.contextmanager
def ray_init_keeps_breakpoints() -> Iterator[None]:
    """``ray.init()`` points this process's ``PYTHONBREAKPOINT`` at Ray's debugger (debugpy, which
    fails where it is not installed): the driver's own ``breakpoint()`` keeps what it had."""
    before = os.environ.get("PYTHONBREAKPOINT")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONBREAKPOINT", None)
        else:
            os.environ["PYTHONBREAKPOINT"] = before


def _stdin_is_a_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (ValueError, OSError):  # closed, or replaced by an object without a file
        return False


def _local_hook(display: Any, *args: Any, **kwargs: Any) -> None:
    """``sys.breakpointhook`` while a local-mode training function runs in this process."""
    if not _stdin_is_a_terminal():
        warn_no_terminal(stacklevel=3)
        return
    session = _HandedOver(display)
    session.begin()  # first: pdb takes the streams the display's status line no longer redirects
    RankPdb(session).set_trace(sys._getframe(1))


class _HandedOver:
    """A local pdb's session: the display hands the terminal over from a stop until continue or quit."""

    def __init__(self, display: Any):
        self._display = display
        self._handed_over: Any = None

    def begin(self) -> bool:
        if self._handed_over is None:
            self._handed_over = self._display.handed_over()
            self._handed_over.__enter__()
        return True

    def end(self) -> None:
        if self._handed_over is not None:
            handed_over, self._handed_over = self._handed_over, None
            handed_over.__exit__(None, None, None)


class DebugRelay:
    def __init__(self, display: Any, users_hook: str | None, serve: bool = True):
        """``serve``: listen for the workers' sessions (not in local mode)."""
        self._display, self._users_hook = display, users_hook
        self.sessions = 0  # begun so far
        self.in_session = False
        self._seen = 0  # sessions as of the last ``debugged()``
        self._socket: socket.socket | None = None
        if users_hook is not None:
            self.env = {"PYTHONBREAKPOINT": users_hook}
            return
        self.env = {"PYTHONBREAKPOINT": HOOK, ADDRESS_ENV: ""}
        if not serve or not _stdin_is_a_terminal():
            return
        import ray

        self._key = secrets.token_bytes(32)
        host = ray.util.get_node_ip_address()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, 0), family=family, backlog=128)
        host, port = self._socket.getsockname()[:2]
        self.env.update({ADDRESS_ENV: f"{host}:{port}", KEY_ENV: self._key.hex()})
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="trainkit-debug-relay", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def in_this_process(self) -> Iterator[None]:
        """Local mode: the training function runs here; its ``breakpoint()`` opens pdb in this
        terminal, handed over by the display as for a rank's session (unless the user set their own)."""
        if self._users_hook is not None:
            yield
            return
        previous, sys.breakpointhook = sys.breakpointhook, functools.partial(_local_hook, self._display)
        try:
            yield
        finally:
            sys.breakpointhook = previous

    def debugged(self) -> bool:
        """True while a session is open, and once after sessions ended: the ranks' progress clocks
        stood still meanwhile (the rank in the debugger, and its peers waiting for it)."""
        sessions = self.sessions
        debugged = self.in_session or sessions != self._seen
        self._seen = sessions
        return debugged

    def close(self) -> None:
        """End an open session (its rank continues) and stop listening (waiting ranks continue)."""
        if self._socket is None:
            return
        os.write(self._stop_w, b"x")
        self._thread.join()
        self._socket.close()
        os.close(self._stop_r)
        os.close(self._stop_w)
        self._socket = None

    # -- the relay's thread ----------------------------------------------------------------------
    def _serve(self) -> None:
        while self._socket in wait([self._socket, self._stop_r]):
            try:
                sock, _ = self._socket.accept()
            except OSError:  # e.g. the connection was reset before it was accepted
                continue
            conn = Connection(sock.detach())
            try:
                deliver_challenge(conn, self._key)  # the order of multiprocessing's Listener.accept()
                answer_challenge(conn, self._key)
                rank = conn.recv()
            except (AuthenticationError, EOFError, OSError):
                conn.close()
                continue
            with conn:
                self._session(conn, rank)

    def _session(self, conn: Connection, rank: str) -> None:
        self.in_session = True
        self.sessions += 1
        try:
            with self._display.handed_over():
                _write(f"trainkit: {rank} stopped at breakpoint(); the other ranks wait. 'c' continues\n")
                self._relay(conn)
        finally:
            self.in_session = False

    def _relay(self, conn: Connection) -> None:
        try:
            while self._wait(conn) == "rank":
                message = conn.recv()
                if message[0] == "out":
                    _write(message[1])
                elif message[0] == "readline":
                    if self._wait(conn, sys.stdin.fileno()) != "terminal":
                        return  # the rank ended (its worker stopped) or the relay closes
                    conn.send(os.read(sys.stdin.fileno(), 65536).decode(errors="replace"))
        except (EOFError, OSError):  # the rank's process ended
            return

    def _wait(self, conn: Connection, terminal: int | None = None) -> str:
        """Which is ready first: "stop" (the relay closes), "rank" or "terminal"."""
        ready = wait([self._stop_r, conn, *([terminal] if terminal is not None else [])])
        return "stop" if self._stop_r in ready else "rank" if conn in ready else "terminal"


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
