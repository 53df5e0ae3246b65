"""The warm cluster's keeper (``trainkit up``): a detached process that starts the cluster an
embedded driver would, records it (``warm.py``), watches it and stops it; ``up`` and ``down``."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from typing import Any

from trainkit._internal.cluster import fork_client, forkserver, ray_private, ray_runtime, ray_worker_main, watchdog
from trainkit._internal.plugins import torch_backend
from trainkit_warm import spare_workers
from trainkit_warm.record import (DECLINED_EXIT, DEFAULT_IDLE_TIMEOUT_S, KEEPER_ENV, POLL_S, USED, answers, attach_lock,
                                  live_record, load_env, read_record, remove_record, same_process, taken_marker,
                                  taken_standby_drivers, write_record)

DEFAULT_SPARES = 4


# -- the keeper -------------------------------------------------------------------------------------
def _cluster_idle() -> bool:
    """No run holds any of the cluster's CPUs: new spares (a process start and the framework's
    import each) would not slow one down."""
    import ray

    try:
        return ray.available_resources().get("CPU", 0) >= ray.cluster_resources().get("CPU", 0)
    except Exception:  # noqa: BLE001 - the GCS is going away: the loop's check ends the keeper
        return False


def _elapsed_clock() -> float:
    """Seconds on a clock a wall-clock step (NTP, a resumed VM) does not move; Linux's also counts
    time suspended, so a laptop's night asleep counts as idle."""
    return time.clock_gettime(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))


class _Usage:
    """How long no driver but the keeper has used the cluster: since the last poll that found one
    connected, or a change in what drivers left behind (a job ended, the used-file touched)."""

    def __init__(self) -> None:
        self._last = _elapsed_clock()
        self._seen: Any = None

    def idle_s(self, running: bool, seen: Any) -> float:
        """``running``: a driver is connected now; ``seen``: the trace of the ones that came and went."""
        if running or seen != self._seen:
            self._last, self._seen = _elapsed_clock(), seen
        return _elapsed_clock() - self._last

    @staticmethod
    def look() -> tuple[bool, Any]:
        """(a driver is connected, the trace drivers left) for ``idle_s``, from Ray's job table and
        the used-file drivers touch when they attach."""
        jobs = ray_private.jobs()
        try:
            used = (ray_runtime.private_dir() / USED).stat().st_mtime_ns
        except OSError:
            used = None
        others = [job for job in jobs.values() if job.driver_pid != os.getpid()]
        return any(not job.is_dead for job in others), (used, len(others))


class _ForkServer:
    """The keeper's fork server (``forkserver.py``), for the cluster's Python workers (its spares
    too) and ``trainkit launch``'s scripts, started again, once no run is going, when it ended or
    retired (a ``pip install`` since it started: it stops listening and removes its socket, and
    exits once the scripts it started ended; the workers it forked live on, as Ray keeps them)."""

    RESTART_AFTER_S = 10.0  # the least time between two starts: a server that cannot start costs little

    def __init__(self, modules: list[str]):
        self.address = str(ray_runtime.private_dir() / "forkserver.sock")
        self.modules = modules
        self._proc: subprocess.Popen | None = None
        self._listened = False  # the current server's socket was seen
        self._retired: list[subprocess.Popen] = []  # serving only the scripts they started
        self._started = -self.RESTART_AFTER_S
        self.usable = bool(modules) and len(self.address.encode()) < 100  # a Unix socket's path is short
        if self.usable:  # the cluster's workers inherit them: they fork from it, and so do their scripts
            os.environ[fork_client.ENV] = os.environ[ray_worker_main.WORKERS_ENV] = self.address

    def keep(self, start_new: bool = True) -> None:
        if not self.usable:
            return
        self._retired = [proc for proc in self._retired if proc.poll() is None]
        if self._proc is not None and self._proc.poll() is None:
            if os.path.exists(self.address):
                self._listened = True
                return
            if not self._listened:
                return  # still loading its modules
            self._retired.append(self._proc)
            self._proc = None
        if start_new and time.monotonic() - self._started >= self.RESTART_AFTER_S:
            self._started, self._listened = time.monotonic(), False
            try:
                self._proc = forkserver.spawn(self.address, self.modules, self.env)
            except OSError as exc:  # (a busy machine: tried again later; ranks meanwhile start fresh)
                print(f"trainkit warm cluster: cannot start the fork server: {exc}", flush=True)

    @property
    def env(self) -> dict[str, str]:
        """The server loads the framework with the OMP_NUM_THREADS of a worker of one CPU where the
        keeper's environment sets none, and serves only scripts whose environment says the same; a
        worker Ray gives more CPUs follows them with the torch backend's function where torch is
        among the modules (``ray_runtime.fork_server_env``)."""
        framework = torch_backend() if "torch" in self.modules else None
        return ray_runtime.fork_server_env(framework)

    def wait_listening(self, timeout_s: float = 10.0) -> None:
        """Until the server started last listens (it binds before loading its modules), it died,
        or ``timeout_s`` passed."""
        deadline = time.monotonic() + timeout_s
        while self._proc is not None and self._proc.poll() is None and not os.path.exists(self.address) \
                and time.monotonic() < deadline:
            time.sleep(0.01)

    def stop(self) -> None:
        for proc in [self._proc, *self._retired]:
            if proc is not None and proc.poll() is None:
                proc.kill()  # its scripts get SIGKILL with it (PR_SET_PDEATHSIG)
                proc.wait()


class _StandbyDriver:
    """A driver process ready for the next ``fit()`` to hand its run to (``handoff.py``): one
    at a time, a new one started (while no run is going) once it was taken or ended. A taken one
    (its socket renamed: ``warm.taken_marker``) is the user's driver: it is left to end with its
    run, also when the keeper stops."""

    RESTART_AFTER_S = 10.0  # as the fork server's: a standby that cannot start costs little

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env  # the keeper's as it started: the standby imports Ray with what a driver would have
        self.usable = len(bytes(taken_marker(2**22))) < 108  # a Unix socket's path is short
        self._proc: subprocess.Popen | None = None
        self._taken: list[subprocess.Popen] = []
        self._failed = -self.RESTART_AFTER_S  # when the last one ended untaken (it could not start, or declined)
        for pid in taken_standby_drivers():  # a dead keeper's
            taken_marker(pid).unlink(missing_ok=True)

    @staticmethod
    def _is_taken(proc: subprocess.Popen) -> bool:
        return taken_marker(proc.pid).exists()

    def keep(self, start_new: bool = True) -> None:
        if self._proc is not None and (self._proc.poll() is not None or self._is_taken(self._proc)):
            self._taken.append(self._proc)  # taken (or ended: it could not start)
            self._proc = None
        for proc in self._taken:
            if proc.poll() is not None:  # ended: reaped, its marker removed
                if proc.returncode == DECLINED_EXIT or not self._is_taken(proc):
                    self._failed = time.monotonic()  # the next one could fare no better at once
                taken_marker(proc.pid).unlink(missing_ok=True)
        self._taken = [proc for proc in self._taken if proc.returncode is None]
        if self._proc is not None:
            return  # loading, or listening
        if start_new and self.usable and time.monotonic() - self._failed >= self.RESTART_AFTER_S:
            try:
                self._proc = subprocess.Popen([sys.executable, "-m", "trainkit_warm.handoff",
                                               str(os.getpid())],
                                              stdin=subprocess.DEVNULL, cwd="/", env=self.env)
            except OSError as exc:  # (a busy machine: tried again later; fits meanwhile run in their own process)
                print(f"trainkit warm cluster: cannot start the standby driver: {exc}", flush=True)

    def stop(self) -> None:
        """Stop the standby unless it was taken (the idle stop calls this once no driver can take it)."""
        if self._proc is not None and self._proc.poll() is None and not self._is_taken(self._proc):
            self._proc.kill()
            self._proc.wait()


def serve(idle_timeout_s: float, num_cpus: int | None, prewarm: list[str], spares: int | None = None) -> int:
    """The keeper: start the cluster, record it, watch it and keep ``spares`` spare workers ready
    (``spare_workers``; default: one per CPU, at most ``DEFAULT_SPARES``); stop it on
    SIGTERM/SIGINT/SIGHUP, when no driver used it for ``idle_timeout_s`` (0: never), or when its
    GCS or raylet ends."""
    driver = _StandbyDriver(dict(os.environ))
    os.environ[KEEPER_ENV] = "1"
    stop: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop.append(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    import ray

    forks = _ForkServer(prewarm)
    forks.keep()  # loading while Ray starts
    ray_runtime.ensure_ray(**({"num_cpus": num_cpus} if num_cpus else {}))
    node = ray_private.global_node()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # Ray's start installs its own
        signal.signal(sig, on_signal)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    pool = spare_workers.Pool(min(cpus, DEFAULT_SPARES) if spares is None else spares, tuple(prewarm))
    forks.wait_listening()  # the spares below then fork from it once it loaded
    pool.refill()  # started now, ready for the first driver
    driver.keep()
    pids = {kind: [info.process.pid for info in infos] for kind, infos in ray_private.node_processes(node).items()}
    all_pids = [pid for group in pids.values() for pid in group]
    starts = watchdog.identities(all_pids + [os.getpid()])
    record = {"version": 1, "uid": os.getuid(), "address": node.gcs_address, "keeper_pid": os.getpid(),
              "keeper_started": starts[os.getpid()], "session_dir": node.get_session_dir_path(),
              "processes": {kind: [group[0], starts.get(group[0], "")] for kind, group in pids.items() if group},
              "pids": {str(pid): starts[pid] for pid in all_pids if pid in starts},
              "idle_timeout_s": idle_timeout_s, "prewarm": prewarm, "spares": pool.size, "load_env": load_env(),
              "auth_mode": os.environ.get("RAY_AUTH_MODE", "token"), "started": time.time(),
              "num_cpus": ray.cluster_resources().get("CPU")}
    write_record(record)
    reason = ""
    usage = _Usage()
    try:
        while not stop:
            time.sleep(POLL_S)
            if (down := ray_runtime.embedded_cluster_down()) is not None:
                reason = down
                break
            idle = _cluster_idle()
            pool.refill(start_new=idle)
            forks.keep(start_new=idle)
            driver.keep(start_new=idle)
            if usage.idle_s(*usage.look()) >= idle_timeout_s > 0:
                with attach_lock(exclusive=True) as alone:  # no driver between its look and its connect
                    if alone and usage.idle_s(*usage.look()) >= idle_timeout_s:
                        remove_record(record)  # drivers that look from now on start their own cluster
                        reason = f"idle for {idle_timeout_s:g} s"
                        break
        reason = reason or f"stopped by {stop[0]}"
    finally:
        remove_record(record)
        driver.stop()
        forks.stop()
        ray_runtime.stop_embedded_cluster()
    print(f"trainkit warm cluster {record['address']} stopped: {reason}", flush=True)
    return 0


# -- up / down ------------------------------------------------------------------------------------
@contextlib.contextmanager
def _one_up_at_a_time() -> Any:
    """Held by ``up`` from its look for a live cluster until the keeper it started recorded one, and
    by ``down`` until the cluster is gone: two ``up`` at once start one cluster (the second finds
    the first's), and an ``up`` during a ``down`` starts a new one, never returns the dying one."""
    fd = os.open(ray_runtime.private_dir() / "warm.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def up(idle_timeout_s: float, num_cpus: int | None, prewarm: list[str], spares: int | None = None,
       timeout_s: float = 120) -> tuple[dict, bool]:
    """Start the keeper (detached) unless a warm cluster is up; (its record, started now)."""
    with _one_up_at_a_time():
        if (record := live_record()) is not None:
            return record, False
        return _start_keeper(idle_timeout_s, num_cpus, prewarm, spares, timeout_s), True


def _start_keeper(idle_timeout_s: float, num_cpus: int | None, prewarm: list[str], spares: int | None,
                  timeout_s: float) -> dict:
    log = ray_runtime.private_dir() / "warm.log"
    command = [sys.executable, "-m", "trainkit_warm.keeper", "--idle-timeout", str(idle_timeout_s),
               *(["--num-cpus", str(num_cpus)] if num_cpus else []), *[f"--prewarm={m}" for m in prewarm],
               *(["--spares", str(spares)] if spares is not None else [])]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with open(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as out:
        keeper = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True, cwd="/")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = read_record()
        if record is not None and record.get("keeper_pid") == keeper.pid and answers(record["address"]):
            return record
        if keeper.poll() is not None:
            raise RuntimeError(f"the warm cluster's keeper exited with status {keeper.returncode}: "
                               f"{log.read_text()[-2000:]}")
        time.sleep(0.05)
    keeper.kill()
    raise RuntimeError(f"the warm cluster did not start within {timeout_s:g} s: {log.read_text()[-2000:]}")


def down(timeout_s: float = 30) -> dict[str, Any] | None:
    """Stop the warm cluster and wait until none of its processes is left (SIGKILL after
    ``timeout_s``); its record, or None when none was up. An ``up`` meanwhile waits for it."""
    with _one_up_at_a_time():
        return _stop_keeper(timeout_s)


def _stop_keeper(timeout_s: float) -> dict[str, Any] | None:
    record = read_record()
    if record is None:
        return None
    try:
        keeper = (int(record["keeper_pid"]), str(record["keeper_started"]))
        recorded = {int(pid): str(started) for pid, started in record.get("pids", {}).items()}
    except (KeyError, TypeError, ValueError):
        return None
    roots = {**recorded, keeper[0]: keeper[1]}
    tree = _without_taken_drivers(watchdog.tree(roots))  # the keeper, the cluster and all they started
    if same_process(*keeper):
        os.kill(keeper[0], signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tree.update(_without_taken_drivers(watchdog.tree(roots)))
        if not any(same_process(pid, started) for pid, started in tree.items()):
            break
        time.sleep(0.05)
    for pid, started in tree.items():
        if same_process(pid, started):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    remove_record(record)
    return record


def _without_taken_drivers(tree: dict[int, str]) -> dict[int, str]:
    """``tree`` less the standby drivers a ``fit()`` took: each is that run's driver, left to record
    what became of its run (``ClusterDied``) and to end by itself, as a driver attached from its own
    process is."""
    taken = taken_standby_drivers()
    return {pid: started for pid, started in tree.items() if pid not in taken}


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="trainkit-warm-keeper")
    parser.add_argument("--idle-timeout", type=float, default=DEFAULT_IDLE_TIMEOUT_S)
    parser.add_argument("--num-cpus", type=int)
    parser.add_argument("--prewarm", action="append", default=[])
    parser.add_argument("--spares", type=int)
    args = parser.parse_args(argv)
    return serve(args.idle_timeout, args.num_cpus, args.prewarm, args.spares)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
