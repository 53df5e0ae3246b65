"""One driver per run: a lease file in the run directory.

The lease names its owner (host, boot id, pid and the pid's start time, a random token) and a
heartbeat the driver rewrites every ``REFRESH_S``. Whether its driver is alive never compares two
clocks (a wall clock stepped by NTP or a VM resume must not hand a live run to a second driver):

- on the same host (name and boot id), the driver is alive while a process with its pid *and its
  start time* exists: a reused pid (a container's PID 1) is not it, a frozen driver still is;
- from another host, the reader watches the lease on its own monotonic clock: the driver is dead
  only once its heartbeat did not change for ``STALE_S`` (``RunLock.acquire`` waits that long
  before a takeover; ``trainkit show`` cannot wait, so it calls such a run running).

Both claims are exclusive: the lease is created with an atomic create-if-absent
(``create_exclusive``: ``link`` on POSIX, ``PutObject`` with ``If-None-Match: *`` on S3), and a
takeover first claims a marker named after the dead lease's token the same way, so of any number
of contenders exactly one wins; the dead lease is then deleted only if it is still exactly as
judged (a driver that beats again before that look keeps its run; one that beats between the look
and the delete finds its lease taken at its next beat and stops writing: ``check``). A create whose answer was lost (its retry
meets 412) reads the object back and counts as won when it holds this call's bytes. Where no such
primitive exists (other ``pyarrow`` filesystems, or S3 without boto3) the lease is written and read
back, which two drivers starting in the same instant can both pass: trainkit warns once.

A heartbeat replaces the lease whole (``RunStorage.write_text``): no reader sees it half-written.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from trainkit._internal.display import warn
from trainkit._internal.interface import setting
from trainkit._internal.storage.retry import with_retries
from trainkit._internal.storage.run_storage import RunStorage
from trainkit._internal.storage.untrusted import stored_token
from trainkit.errors import RunLockedError

LOCK = ".lock"
TAKEOVER = ".lock.takeover-"  # + the token of the dead lease being taken over
REFRESH_S = 10.0
STALE_S = 60.0  # another host's lease whose heartbeat stays unchanged this long (watched) is dead
WATCH_S = 2.0  # how often a lease being watched is read again


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return True


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc); None where unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


@functools.lru_cache(maxsize=1)
def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def same_host(lease: dict[str, Any]) -> bool:
    """Whether ``lease`` was written on this machine (and since its last boot)."""
    return lease.get("host") == socket.gethostname() and lease.get("boot", boot_id()) == boot_id()


def lease_alive(lease: dict[str, Any] | None) -> bool:
    """Whether the driver that wrote ``lease`` is alive, as far as one look can tell: on this host,
    its pid with its start time exists; from another host it is taken as alive (only a watch on
    this host's monotonic clock can tell otherwise: ``RunLock``)."""
    if not lease:
        return False
    try:
        pid = int(lease.get("pid", -1))
    except (TypeError, ValueError):
        return False
    if not same_host(lease):
        return True
    if "started" not in lease:  # written by a trainkit before 0.2: only its heartbeat tells
        age = heartbeat_age_s(lease)
        return age is not None and age <= STALE_S and _pid_alive(pid)
    return lease["started"] is not None and process_start(pid) == lease["started"]


def heartbeat_age_s(lease: dict[str, Any] | None) -> float | None:
    """Seconds since ``lease``'s last heartbeat by this host's wall clock (only for leases without a
    start time, and for display); None for no lease or a malformed one."""
    if not lease:
        return None
    try:
        return time.time() - float(lease.get("heartbeat", 0))
    except (TypeError, ValueError):
        return None


def driver_alive(storage: RunStorage) -> bool:
    """Whether a driver is running the run in ``storage`` now, as far as one look can tell (``lease_alive``)."""
    return lease_alive(_read_lease(storage))


def _read_lease(storage: RunStorage, name: str = LOCK) -> dict[str, Any] | None:
    text = with_retries("read", storage.path(name), lambda: storage.read_text(name))
    try:
        lease = json.loads(text) if text else None
    except ValueError:
        return None  # a torn lease is no lease
    return lease if isinstance(lease, dict) else None


def create_exclusive(storage: RunStorage, name: str, data: bytes) -> bool:
    """Create ``name`` holding ``data`` unless it exists, atomically where the store can
    (``stores.Store.create_exclusive``); return whether this call created it."""
    return storage.store.create_exclusive(storage.fs, storage.path(name), data)


class RunLock:
    def __init__(self, storage: RunStorage):
        self.storage = storage
        self.owner = {"host": socket.gethostname(), "boot": boot_id(), "pid": os.getpid(),
                      "started": process_start(os.getpid()), "token": uuid.uuid4().hex}
        self._beats = 0  # counted in the lease: each heartbeat changes it, whatever the wall clock says
        self._released = threading.Event()
        self._took_over: str | None = None  # the takeover marker this driver created
        self._renewed = time.monotonic()  # when the lease was last written
        self._lost: str | None = None  # why this driver no longer holds the lease

    def _lease_bytes(self) -> bytes:
        self._beats += 1
        return json.dumps({**self.owner, "beat": self._beats, "heartbeat": time.time()}).encode()

    def acquire(self) -> None:
        """Take the lease (failing fast with ``RunLockedError``) and keep it fresh in a thread."""
        name = self.storage.name
        for _ in range(5):  # each round either wins, fails, or saw the lease change under it
            if create_exclusive(self.storage, LOCK, self._lease_bytes()):
                break
            lease = _read_lease(self.storage)
            if lease is None:
                continue  # released (or torn) in between: try again
            token = stored_token(self.storage.path(LOCK), "token", lease.get("token"))
            if token is None:  # no trainkit wrote it: whoever holds it, it is never taken over
                raise RunLockedError(f"run {name!r}: its lock {self.storage.path(LOCK)} holds an invalid token, so "
                                     "trainkit cannot take it over safely; delete that file if no driver runs this run")
            if self._alive(lease):
                raise RunLockedError(
                    f"run {name!r} is being run by another driver (host {lease.get('host')}, "
                    f"pid {lease.get('pid')}); wait for it to finish or pick another {setting('name')}")
            marker = TAKEOVER + token
            if not create_exclusive(self.storage, marker, self.owner["token"].encode()):
                raise RunLockedError(f"run {name!r} is being taken over by another driver at the same moment")
            if _read_lease(self.storage) != lease:
                self._delete(marker)
                continue  # it changed since it was judged dead (a heartbeat, a release): look again
            self._delete(LOCK)  # only the marker's creator deletes the dead lease
            self._took_over = marker
            if create_exclusive(self.storage, LOCK, self._lease_bytes()):
                break
            raise RunLockedError(f"run {name!r} was claimed by another driver at the same moment")
        else:
            raise RunLockedError(f"run {name!r}: its lock kept changing while trainkit tried to take it")
        # the read-back the fallback of stores without create-if-absent relies on (best effort there)
        if (_read_lease(self.storage) or {}).get("token") != self.owner["token"]:
            raise RunLockedError(f"run {name!r} was claimed by another driver at the same moment")
        self._renewed = time.monotonic()
        threading.Thread(target=self._keep_fresh, name="trainkit-lease", daemon=True).start()

    def _alive(self, lease: dict[str, Any]) -> bool:
        """``lease_alive``, and for another host's lease: whether it changed (a heartbeat, a release)
        while this driver watched it for ``STALE_S`` on its own monotonic clock."""
        if same_host(lease) or not lease_alive(lease):
            return lease_alive(lease)
        warn(f"run {self.storage.name!r} is held by a driver on host {lease.get('host')}; watching its "
             f"heartbeat for {STALE_S:g} s before taking the run over", stacklevel=3)
        deadline = time.monotonic() + STALE_S
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(WATCH_S, left))
            now = _read_lease(self.storage)
            if now != lease:
                return now is not None  # a heartbeat; released: the takeover below sees it and starts over
        return False

    def _delete(self, name: str) -> None:
        with_retries("delete", self.storage.path(name), lambda: self.storage.delete_file(name))

    def _keep_fresh(self) -> None:
        while not self._released.wait(REFRESH_S) and self._renew():
            pass

    def _renew(self) -> bool:
        """One heartbeat; False once the lease was taken over (we looked dead)."""
        try:
            lease = _read_lease(self.storage)
            if lease and lease.get("token") != self.owner["token"]:
                self._lost = f"taken over by host {lease.get('host')}, pid {lease.get('pid')}"
                return False  # never write over the new owner
            self.storage.write_text(LOCK, self._lease_bytes().decode())
            self._renewed = time.monotonic()
        except OSError:
            pass  # a storage hiccup; the next beat retries
        return True

    def check(self) -> None:
        """Raise ``RunLockedError`` once this driver may no longer write the run (the fence for a
        driver cut off from storage or frozen): its lease was taken over, or it could not renew it
        for ``STALE_S - REFRESH_S``, after which another driver may take it over at any moment."""
        silent_s = time.monotonic() - self._renewed
        why = self._lost or (silent_s > STALE_S - REFRESH_S and f"not renewed for {silent_s:.0f} s")
        if why:
            raise RunLockedError(f"run {self.storage.name!r}: this driver lost its lease ({why}), so it "
                                 "stops writing the run: another driver may be running it")

    def release(self) -> None:
        """Give the lease back. Never raises: a lease left behind goes stale by itself, and the
        caller's own error (release runs in ``finally``) must not be replaced by this one."""
        self._released.set()
        try:
            lease = _read_lease(self.storage)
            if lease and lease.get("token") == self.owner["token"]:
                self._delete(LOCK)
            if self._took_over:
                self._delete(self._took_over)
        except OSError as exc:
            warn(f"could not release the lock of run {self.storage.name!r} ({exc}); "
                 f"the next driver takes it over once it is {STALE_S:.0f} s stale")
