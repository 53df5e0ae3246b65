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

Workers stay per run: Ray gives every actor a process of its own and every job its own workers,
so a run gets fresh worker processes that never ran another run's code. What the warm cluster
saves is Ray's start (GCS, raylet, agents) and, for the next driver, the raylet's prestarted idle
workers, which have imported Ray and, with ``--prewarm``, begun importing the framework (in a
background thread of the worker process, ``ray_worker_main.py``): nothing of a user's code.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trainkit._internal.cluster import ray_runtime, watchdog

RECORD = "warm.json"
USED = "warm.used"  # its mtime: when a driver last connected
KEEPER_ENV = "TRAINKIT_WARM_KEEPER"  # set in the keeper: its ensure_ray starts the cluster, never attaches
DEFAULT_IDLE_TIMEOUT_S = 30 * 60
POLL_S = 1.0


def record_path() -> Path:
    return ray_runtime.private_dir() / RECORD


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


def _same_process(pid: int, started: str) -> bool:
    return watchdog.identities([pid]).get(pid) == started


def _answers(address: str, timeout_s: float = 0.5) -> bool:
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
        keeper_alive = _same_process(int(record["keeper_pid"]), str(record["keeper_started"]))
        gcs = record["processes"]["gcs_server"]
        usable = keeper_alive and _same_process(int(gcs[0]), str(gcs[1])) and \
            str(record["address"]).startswith("127.0.0.1:")
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    if not keeper_alive:
        _remove_record(record)
        return None
    if not usable or (check_port and not _answers(record["address"])):
        return None
    return record


def _remove_record(record: dict[str, Any]) -> None:
    """Remove the record if it is still ``record`` (a newer keeper's is left alone)."""
    if read_record() == record:
        try:
            record_path().unlink()
        except FileNotFoundError:
            pass


def _write_record(record: dict[str, Any]) -> None:
    path = record_path()
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(record, f)
    os.replace(partial, path)


def touch() -> None:
    """A driver connected: the keeper's idle clock starts again (besides Ray's own job table)."""
    try:
        path = ray_runtime.private_dir() / USED
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        os.utime(path)
    except OSError:
        pass


def attachable() -> dict[str, Any] | None:
    """The warm cluster a driver should connect to, or None (start the embedded one)."""
    if os.environ.get(KEEPER_ENV) or os.environ.get("TRAINKIT_WARM", "1").lower() in ("0", "false", "no"):
        return None
    return live_record()


# -- the keeper -------------------------------------------------------------------------------------
def _cluster_processes() -> dict[str, list[int]]:
    import ray

    node = ray._private.worker._global_node
    processes = getattr(node, "all_processes", None) or {}
    return {kind: [info.process.pid for info in infos] for kind, infos in processes.items()}


def _last_used(since: float) -> float:
    """The latest moment a driver other than the keeper was connected (now while one is)."""
    import ray

    try:
        jobs = ray._private.worker.global_worker.gcs_client.get_all_job_info(
            skip_submission_job_info_field=True, skip_is_running_tasks_field=True)
    except Exception:  # noqa: BLE001 - Ray's internals moved: count the used-file alone
        jobs = {}
    latest = since
    try:
        latest = max(latest, (ray_runtime.private_dir() / USED).stat().st_mtime)
    except OSError:
        pass
    for job in jobs.values():
        if job.driver_pid == os.getpid():
            continue
        if not job.is_dead:
            return time.time()
        latest = max(latest, job.end_time / 1000.0)
    return latest


def serve(idle_timeout_s: float, num_cpus: int | None, prewarm: list[str]) -> int:
    """The keeper: start the cluster, record it, watch it; stop it on SIGTERM/SIGINT/SIGHUP, when
    no driver used it for ``idle_timeout_s`` (0: never), or when its GCS or raylet ends."""
    os.environ[KEEPER_ENV] = "1"
    if prewarm:  # the raylet, and through it every worker it starts, inherits it (ray_worker_main.py)
        os.environ["TRAINKIT_WORKER_PREWARM"] = ",".join(prewarm)
    stop: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop.append(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    import ray

    ray_runtime.ensure_ray(**({"num_cpus": num_cpus} if num_cpus else {}))
    node = ray._private.worker._global_node
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # Ray's start installs its own
        signal.signal(sig, on_signal)
    pids = _cluster_processes()
    all_pids = [pid for group in pids.values() for pid in group]
    starts = watchdog.identities(all_pids + [os.getpid()])
    record = {"version": 1, "uid": os.getuid(), "address": node.gcs_address, "keeper_pid": os.getpid(),
              "keeper_started": starts[os.getpid()], "session_dir": node.get_session_dir_path(),
              "processes": {kind: [group[0], starts.get(group[0], "")] for kind, group in pids.items() if group},
              "pids": {str(pid): starts[pid] for pid in all_pids if pid in starts},
              "idle_timeout_s": idle_timeout_s, "prewarm": prewarm,
              "auth_mode": os.environ.get("RAY_AUTH_MODE", "token"), "started": time.time(),
              "num_cpus": ray.cluster_resources().get("CPU")}
    _write_record(record)
    reason = ""
    last_used = time.time()
    try:
        while not stop:
            time.sleep(POLL_S)
            if (down := ray_runtime.embedded_cluster_down()) is not None:
                reason = down
                break
            last_used = _last_used(last_used)
            if idle_timeout_s and time.time() - last_used >= idle_timeout_s:
                reason = f"idle for {idle_timeout_s:g} s"
                break
        reason = reason or f"stopped by {stop[0]}"
    finally:
        _remove_record(record)
        ray_runtime._stop_embedded_cluster()
    print(f"trainkit warm cluster {record['address']} stopped: {reason}", flush=True)
    return 0


# -- up / down ------------------------------------------------------------------------------------
def up(idle_timeout_s: float, num_cpus: int | None, prewarm: list[str], timeout_s: float = 120) -> tuple[dict, bool]:
    """Start the keeper (detached) unless a warm cluster is up; (its record, started now)."""
    if (record := live_record()) is not None:
        return record, False
    log = ray_runtime.private_dir() / "warm.log"
    command = [sys.executable, "-m", "trainkit._internal.cluster.warm", "--idle-timeout", str(idle_timeout_s),
               *(["--num-cpus", str(num_cpus)] if num_cpus else []), *[f"--prewarm={m}" for m in prewarm]]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        keeper = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True, cwd="/")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = read_record()
        if record is not None and record.get("keeper_pid") == keeper.pid and _answers(record["address"]):
            return record, True
        if keeper.poll() is not None:
            raise RuntimeError(f"the warm cluster's keeper exited with status {keeper.returncode}: "
                               f"{log.read_text()[-2000:]}")
        time.sleep(0.05)
    keeper.kill()
    raise RuntimeError(f"the warm cluster did not start within {timeout_s:g} s: {log.read_text()[-2000:]}")


def down(timeout_s: float = 30) -> dict[str, Any] | None:
    """Stop the warm cluster and wait until none of its processes is left (SIGKILL after
    ``timeout_s``); its record, or None when none was up."""
    record = read_record()
    if record is None:
        return None
    try:
        keeper = (int(record["keeper_pid"]), str(record["keeper_started"]))
        recorded = {int(pid): str(started) for pid, started in record.get("pids", {}).items()}
    except (KeyError, TypeError, ValueError):
        return None
    roots = {**recorded, keeper[0]: keeper[1]}
    tree = watchdog.tree(roots)  # the keeper, the cluster and everything they started (workers, watchdog)
    if _same_process(*keeper):
        os.kill(keeper[0], signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tree.update(watchdog.tree(roots))
        if not any(_same_process(pid, started) for pid, started in tree.items()):
            break
        time.sleep(0.05)
    for pid, started in tree.items():
        if _same_process(pid, started):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    _remove_record(record)
    return record


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="trainkit-warm-keeper")
    parser.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT_S)
    parser.add_argument("--num-cpus", type=int)
    parser.add_argument("--prewarm", action="append", default=[])
    args = parser.parse_args(argv)
    return serve(args.idle_timeout, args.num_cpus, args.prewarm)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
