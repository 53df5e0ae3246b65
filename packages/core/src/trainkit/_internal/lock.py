"""One driver per run: a lease file in the run directory.

The lease names its owner (host, pid, a random token) and a heartbeat time the driver refreshes.
Another driver may take it over only when the owner is gone: same host and the pid no longer
exists, or the heartbeat is older than ``STALE_S``.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

from trainkit._internal.storage import RunStorage, is_local

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
        self._released = threading.Event()

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
        """Take the lease (failing fast with ``RunLockedError``) and keep it fresh in a thread."""
        lease = self._read()
        if lease and lease.get("token") != self.owner["token"] and not self._stale(lease):
            raise RunLockedError(
                f"run {self.storage.name!r} is being run by another driver (host {lease.get('host')}, "
                f"pid {lease.get('pid')}); wait for it to finish or pick another RunConfig(name=...)")
        if lease is None and is_local(self.storage.fs):
            try:  # exclusive create: of two drivers starting together, exactly one wins
                os.close(os.open(self.storage.path(LOCK), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                raise RunLockedError(f"run {self.storage.name!r} was claimed by another driver at the same moment") from None
        self._write()
        if (self._read() or {}).get("token") != self.owner["token"]:  # lost a race on a shared store
            raise RunLockedError(f"run {self.storage.name!r} was claimed by another driver at the same moment")
        threading.Thread(target=self._keep_fresh, name="trainkit-lease", daemon=True).start()

    def _write(self) -> None:
        self.storage.write_text(LOCK, json.dumps({**self.owner, "heartbeat": time.time()}))

    def _keep_fresh(self) -> None:
        while not self._released.wait(REFRESH_S):
            lease = self._read()
            if lease and lease.get("token") != self.owner["token"]:
                return  # taken over (we looked dead): never write over the new owner
            try:
                self._write()
            except OSError:
                pass  # a storage hiccup; the next beat retries

    def release(self) -> None:
        self._released.set()
        lease = self._read()
        if lease and lease.get("token") == self.owner["token"]:
            self.storage.delete_file(LOCK)
