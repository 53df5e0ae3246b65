"""The rank's side of the fork server (``forkserver.py``): ask it for a forked child that runs a
script as ``python SCRIPT ARGS`` would, and wait for the child's exit status. Imports nothing of
trainkit: a Ray worker's entry script (``ray_worker_main.py``) loads it by its path.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
from typing import Any

ENV = "TRAINKIT_FORKSERVER"  # the socket's path, in the warm cluster's processes
STALE = "site-packages changed since the fork server started"  # the refusal that retires the server
HEADER = struct.Struct("!I")  # a request's length, before its JSON
REQUEST_TIMEOUT_S = 10.0


class ForkedScript:
    """A script the server started for this rank, as much of ``subprocess.Popen`` as launch uses."""

    def __init__(self, pid: int, conn: socket.socket, replies: Any, stdout: int | None, stderr: int | None):
        self.pid, self._conn, self._replies, self.returncode = pid, conn, replies, None
        self.stdout, self.stderr = (None if fd is None else os.fdopen(fd, "rb", buffering=0) for fd in (stdout, stderr))

    def wait(self) -> int:
        """The exit status as ``Popen.wait`` gives it (-N: killed by signal N)."""
        if self.returncode is None:
            reply = read_reply(self._replies)
            self._replies.close()
            self._conn.close()  # the server forgets the child
            self.returncode = reply["exit"] if reply else -signal.SIGKILL  # the server died: so did its child
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start(address: str, argv: list[str], mode: str, cwd: str | None, env: dict[str, str],
          runtime_keys: set[str], inherit_stdio: bool = False, outlive_server: bool = False) -> ForkedScript | str:
    """Ask the server at ``address`` to run ``argv`` (``[sys.executable, SCRIPT or "-m", MODULE,
    *args]``); the started script, or why not (then run it as a fresh process). ``runtime_keys``:
    the environment variables the caller set that the script reads at run time (never compared).
    The script's stdout and stderr are pipes the caller reads, or with ``inherit_stdio`` the
    caller's own stdio (then ``ForkedScript.stdout``/``stderr`` are None). With ``outlive_server``
    the script does not die with the server (a Ray worker: Ray ends it)."""
    if mode not in ("script", "module") or argv[0] != sys.executable:
        return f"{mode} mode, {argv[0]}: not what the fork server runs"
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if inherit_stdio:
        devnull, stdout_w, stderr_w = os.dup(0), os.dup(1), os.dup(2)
        stdout_r = stderr_r = None
    else:
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
    replies = None
    try:
        conn.settimeout(REQUEST_TIMEOUT_S)
        conn.connect(address)
        replies = conn.makefile("rb")  # one line per answer; a short script's exit may come in the same read
        body = json.dumps({"argv": argv, "mode": mode, "cwd": cwd or os.getcwd(), "env": env,
                           "runtime_keys": sorted(runtime_keys), "outlive_server": outlive_server}).encode()
        message = HEADER.pack(len(body)) + body
        try:
            sent = socket.send_fds(conn, [message], [devnull, stdout_w, stderr_w])
            if sent < len(message):  # (an empty sendall on a connection the server closed fails: EPIPE)
                conn.sendall(message[sent:])
        except OSError as exc:  # refused before it was read (out of descriptors): why, if it said
            reply = read_reply(replies) or {"refused": f"no answer: {exc}"}
        else:
            conn.settimeout(None)  # the answer, however slow: giving up on a child forked meanwhile would start the script twice
            reply = read_reply(replies)
    except OSError as exc:
        reply = {"refused": f"no answer: {exc}"}
    finally:
        for fd in (devnull, stdout_w, stderr_w):
            os.close(fd)
    if not reply or "pid" not in reply:
        if replies is not None:
            replies.close()
        conn.close()  # (a child forked for it meanwhile: the server kills it)
        for fd in (stdout_r, stderr_r):
            if fd is not None:
                os.close(fd)
        return (reply or {}).get("refused", "the fork server closed the connection")
    return ForkedScript(reply["pid"], conn, replies, stdout_r, stderr_r)


def read_reply(replies: Any) -> dict | None:
    """The server's next answer from ``replies`` (the connection's ``makefile("rb")``), one JSON
    line; None when the connection ended first."""
    try:
        line = replies.readline()
    except OSError:
        return None
    return json.loads(line) if line.endswith(b"\n") else None
