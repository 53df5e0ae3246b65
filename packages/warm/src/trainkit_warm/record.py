"""The warm local cluster: a Ray head that outlives one driver (``trainkit up`` / ``trainkit down``).

Opt-in. ``trainkit up`` starts a keeper process in a session of its own; the keeper starts the same
embedded cluster a driver would (``ray_runtime.ensure_ray``: loopback only, Ray's token
authentication, its files under the user's 0700 private directory, Ray's internals patched to start
fast) and then stays, as that cluster's owner, until ``trainkit down`` (SIGTERM), its idle timeout
(no driver connected for that long) or its own death (its watchdog then reaps the cluster, as for
any embedded one). It records the cluster in ``<private dir>/warm.json`` (0600, written whole).

A driver started afterwards (``fit()``, ``trainkit launch``, a script) finds the record in
``ensure_ray`` and connects to it (``ray.init(address=...)``) instead of starting Ray. It uses the
record only when the record is this user's, its keeper and GCS are the very processes recorded
(pid and start time, never a reused pid) and the GCS port answers on loopback; anything else and
the driver starts its embedded cluster as before. ``RAY_ADDRESS`` still wins; so does
``TRAINKIT_WARM=0`` (never attach).

Workers stay per run: every run gets fresh worker processes that never ran another run's code.
What the warm cluster saves is Ray's start (GCS, raylet, agents) and the workers' start: its keeper
holds spare worker processes with ``--prewarm``'s modules imported, which the next driver takes
(``spare_workers.py``): nothing of a user's code runs in one before it is taken.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Iterator

from trainkit._internal.cluster import watchdog
from trainkit._internal.cluster.forkserver import load_time_env
from trainkit._internal.cluster.userdir import private_dir

RECORD = "warm.json"
USED = "warm.used"  # its mtime: when a driver last connected
ATTACH_LOCK = "warm.attach"  # shared by a driver from its look at the record until it connected
STANDBY_DRIVER = "driver.sock"  # the keeper's standby driver listens there (handoff.py)
DECLINED_EXIT = 3  # a standby driver's exit status once it declined a run (the keeper waits before the next)
KEEPER_ENV = "TRAINKIT_WARM_KEEPER"  # set in the keeper: it and its children never attach (it owns the cluster)
DEFAULT_IDLE_TIMEOUT_S = 30 * 60
POLL_S = 1.0


def record_path() -> Path:
    return private_dir() / RECORD


def standby_driver_socket() -> Path:
    return private_dir() / STANDBY_DRIVER


def taken_marker(pid: int) -> Path:
    """The name the standby driver ``pid`` gives its socket once a ``fit()`` took it: the keeper (and
    ``trainkit down``) then leave that process to end with its run; the keeper removes it after."""
    return private_dir() / f"{STANDBY_DRIVER}.taken.{pid}"


def taken_standby_drivers() -> set[int]:
    """The pids of the standby drivers a ``fit()`` took (``taken_marker``)."""
    found = (marker.name.rpartition(".")[2] for marker in private_dir().glob(f"{STANDBY_DRIVER}.taken.*"))
    return {int(pid) for pid in found if pid.isdigit()}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` -> seconds; ``0`` or ``never``: no idle timeout."""
    text = text.strip().lower()
    if text in ("never", "none", "off"):
        return 0.0
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1)
    seconds = float(number) * unit
    if seconds < 0:
        raise ValueError(f"a negative duration: {text!r}")
    return seconds


def read_record() -> dict[str, Any] | None:
    """The recorded warm cluster when the record is this user's file, private, and whole."""
    try:
        fd = os.open(record_path(), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd) as f:
        info = os.fstat(f.fileno())
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        try:
            record = json.load(f)
        except ValueError:
            return None
    return record if isinstance(record, dict) and record.get("uid") == os.getuid() else None


def same_process(pid: int, started: str) -> bool:
    return watchdog.identities([pid]).get(pid) == started


def answers(address: str, timeout_s: float = 0.5) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def live_record(check_port: bool = True) -> dict[str, Any] | None:
    """The recorded warm cluster if it is up and usable: its keeper and GCS are the processes
    recorded and the GCS answers on loopback. A record whose keeper is gone is removed (stale)."""
    record = read_record()
    if record is None:
        return None
    try:
        keeper_alive = same_process(int(record["keeper_pid"]), str(record["keeper_started"]))
        gcs = record["processes"]["gcs_server"]
        usable = keeper_alive and same_process(int(gcs[0]), str(gcs[1])) and \
            str(record["address"]).startswith("127.0.0.1:")
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    if not keeper_alive:
        remove_record(record)
        return None
    if not usable or (check_port and not answers(record["address"])):
        return None
    return record


def remove_record(record: dict[str, Any]) -> None:
    """Remove the record if it is still ``record`` (a newer keeper's is left alone)."""
    if read_record() == record:
        try:
            record_path().unlink()
        except FileNotFoundError:
            pass


def write_record(record: dict[str, Any]) -> None:
    path = record_path()
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(record, f)
    os.replace(partial, path)


@contextlib.contextmanager
def attach_lock(exclusive: bool = False) -> Iterator[bool]:
    """A driver holds it shared from its look at the record until it connected (and touched the
    used-file); the keeper takes it exclusive, without waiting (yields False when a driver holds
    it), for its last look before an idle stop: a driver attaching at the idle timeout's very
    moment is seen, never connected to a cluster that is stopping."""
    fd = os.open(private_dir() / ATTACH_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
        except BlockingIOError:
            yield False
        else:
            yield True
    finally:
        os.close(fd)


def touch() -> None:
    """A driver connected: the keeper's idle clock starts again (besides Ray's own job table)."""
    try:
        path = private_dir() / USED
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        os.utime(path)
    except OSError:
        pass


def load_env() -> dict[str, str]:
    """This process's environment variables that change how Python or a framework loads: the warm
    cluster's processes loaded with the keeper's, so a driver whose differ does not attach."""
    return load_time_env(dict(os.environ))


def attachable(quiet: bool = False) -> dict[str, Any] | None:
    """The warm cluster a driver should connect to, or None (start the embedded one); ``quiet``:
    without the note on why a live one is not used."""
    if os.environ.get(KEEPER_ENV) or os.environ.get("TRAINKIT_WARM", "1").lower() in ("0", "false", "no"):
        return None
    record = live_record()
    if record is not None and (theirs := record.get("load_env", {})) != (mine := load_env()):
        if quiet:
            return None
        key = min(k for k in {*theirs, *mine} if theirs.get(k) != mine.get(k))
        print(f"trainkit: not using the warm cluster: {key}={mine.get(key)!r} here, {theirs.get(key)!r} where "
              "`trainkit up` ran (it changes how Python or the framework loads); starting Ray for this run",
              file=sys.stderr, flush=True)
        return None
    return record
