"""One driver per run: a lease file in the run directory.

The lease names its owner (host, pid, a random token) and a heartbeat time the driver refreshes.
Another driver may take it over only when the owner is gone: same host and the pid no longer
exists, or the heartbeat is older than ``STALE_S``.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

from trainkit._internal.storage import RunStorage

LOCK = ".lock"
REFRESH_S = 10.0
STALE_S = 60.0


class RunLockedError(RuntimeError):
    """Another driver is running this run."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    def __init__(self, storage: RunStorage):
        self.storage = storage
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex}
        self._refreshed = 0.0

    def _read(self) -> dict | None:
        text = self.storage.read_text(LOCK)
        try:
            return json.loads(text) if text else None
        except ValueError:
            return None  # a torn lease is no lease

    def _stale(self, lease: dict) -> bool:
        if lease.get("host") == self.owner["host"]:
            return not _pid_alive(int(lease.get("pid", -1)))
        return time.time() - float(lease.get("heartbeat", 0)) > STALE_S

    def acquire(self) -> None:
        lease = self._read()
        if lease and lease.get("token") != self.owner["token"] and not self._stale(lease):
            raise RunLockedError(
                f"run {self.storage.name!r} is being run by another driver (host {lease.get('host')}, "
                f"pid {lease.get('pid')}); wait for it to finish or pick another RunConfig(name=...)")
        self._write()
        if (self._read() or {}).get("token") != self.owner["token"]:  # lost a race on a shared store
            raise RunLockedError(f"run {self.storage.name!r} was claimed by another driver at the same moment")

    def _write(self) -> None:
        self.storage.write_text(LOCK, json.dumps({**self.owner, "heartbeat": time.time()}))
        self._refreshed = time.monotonic()

    def refresh(self) -> None:
        """Renew the heartbeat; cheap to call often (writes at most every ``REFRESH_S``)."""
        if time.monotonic() - self._refreshed >= REFRESH_S:
            self._write()

    def release(self) -> None:
        lease = self._read()
        if lease and lease.get("token") == self.owner["token"]:
            self.storage.delete_file(LOCK)
