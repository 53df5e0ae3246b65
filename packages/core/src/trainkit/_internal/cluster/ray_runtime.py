"""Connect to Ray: an existing cluster (``RAY_ADDRESS`` or an earlier ``ray.init``) or an embedded,
quiet, loopback-only local one. Ray turns token authentication on for a new local cluster by
default; trainkit keeps that and only silences the notice.

Loopback only: on Linux Ray replaces a 127.0.0.1 node address with the machine's reachable IP
and its servers listen on every interface. Ray's ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` switch
(its single-machine mode) keeps the node address on loopback, so every server of the embedded
cluster (GCS, raylet, workers, agents) binds 127.0.0.1.

Private files: Ray makes its session directories world-writable (0777, no sticky bit) and writes
its auth token with the default umask (0644). The embedded cluster's directories live under a
0700 directory of the user's (``$TMPDIR/trainkit-<uid>/ray``) and the token (``~/.ray/auth_token``)
is 0600.

Ray internals: to start and stop faster, trainkit replaces a few of Ray's private functions while
it starts the embedded cluster, each only on the Ray releases it was tested on and where its target
is as expected (``ray_patches.py``; ``TRAINKIT_RAY_PATCHES=0`` turns them all off): no autoscaler
monitor, log monitor or API server; stand-ins for the two per-node agents (``ray_agent_stub.py``);
20 ms socket retries; a worker entry point that imports pydantic only when used and starts the worker
forked from a fork server that imported the framework once for the cluster (``ray_worker_main.py``,
``start_fork_server``); a 20 ms poll for the raylet's registration; the cluster's processes in a
session of their own (a signal to the driver's process group stops the driver's run before the
cluster); a parallel stop at exit. Without them: Ray's own code paths, slower, with loopback and the
private files kept. Every read of a Ray private is in ``ray_private.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Callable, Iterator
from pathlib import Path

from trainkit._internal.cluster import fork_child, fork_client, forkserver, ray_patches, ray_private, ray_worker_main, watchdog
from trainkit._internal.cluster.userdir import private_dir

if TYPE_CHECKING:
    from trainkit.backend import BackendConfig
    from trainkit.runtime import AttachedCluster

Attach = Callable[[dict], "AttachedCluster | None"]  # a runtime plugin's trainkit_attach_cluster


def ensure_ray(framework: type[BackendConfig] | None = None, *, scripts: bool = False, attach: Attach | None = None,
               **init_kwargs: object) -> None:
    """Connect to Ray unless connected: ``RAY_ADDRESS``'s cluster, else the one ``attach`` (a runtime
    plugin's hook) connects to, else an embedded cluster shaped by ``init_kwargs`` (e.g. ``num_cpus``),
    whose workers start forked from a process that imported ``framework`` (``start_fork_server``, or
    the one ``fork_server_ahead`` started), as do, with ``scripts``, the scripts of ``trainkit
    launch`` (``fork_client.ENV``)."""
    global _ahead
    with _starting:
        _ensure_ray(framework, scripts, attach, init_kwargs)
        if _ahead is not None:  # Ray is connected without it (already, RAY_ADDRESS, an attached cluster)
            _ahead = None
            stop_fork_server()


def _ensure_ray(framework: type[BackendConfig] | None, scripts: bool, attach: Attach | None, init_kwargs: dict) -> None:
    global _ahead
    import ray

    if ray.is_initialized():
        return
    quiet = {"logging_level": logging.ERROR, "log_to_driver": False, "namespace": "trainkit"}
    ray_patches.quiet_worker_pool_warning()
    if os.environ.get("RAY_ADDRESS"):
        ray.init(**quiet)
        return
    if attach is not None and (cluster := attach(dict(quiet))) is not None:
        _attached_to(cluster)
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not _forks_workers() or not ray_patches.enabled("lean_node"):  # (the workers' entry point)
        framework = None
    forking = bool(framework or os.environ.get(ray_worker_main.WORKERS_ENV))
    init_kwargs["_system_config"] = {**ray_patches.system_config(forking), **(init_kwargs.get("_system_config") or {})}
    _private_auth_token()
    with _embedded_start():
        try:
            # the fork server loads while Ray starts; the raylet, so its workers, inherit its address
            if framework is not None:
                ahead, _ahead = _ahead, None  # this thread's, for this framework and still up: taken
                address = _fork_server_address() if ahead == (framework, _fork_server, threading.get_ident()) \
                    and _fork_server.poll() is None else start_fork_server(framework)
                os.environ[ray_worker_main.WORKERS_ENV] = address
                if scripts:
                    os.environ[fork_client.ENV] = address
            # address="local": an embedded cluster, never one that `ray start` (or another process's
            # test cluster) recorded in /tmp/ray; a cluster is joined only through RAY_ADDRESS.
            ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1",
                     _temp_dir=str(private_dir() / "ray"), **quiet, **init_kwargs)
        except BaseException:
            stop_fork_server()
            raise
    global _embedded_node
    _embedded_node = node = ray_private.global_node()
    _check_loopback(node)
    atexit.register(stop_embedded_cluster)  # runs before Ray's own exit hook (atexit is LIFO)
    watchdog.start([info.process.pid for infos in ray_private.node_processes(node).values() for info in infos]
                   + ([_fork_server.pid] if _fork_server is not None else []))


@contextlib.contextmanager
def _embedded_start() -> Iterator[None]:
    """While ``ray.init`` starts the embedded cluster: the settings (``ray_patches.SETTINGS_ENV``) in
    the environment its processes inherit, this process's single-machine flag, Ray's token notice
    silenced and the patches applied; all undone after. This process's environment is then as it
    was: a `ray start` it runs later (a node of a real cluster) must not inherit single-machine
    mode, or Ray refuses to join ("not supported on Windows and OSX")."""
    environ_before = {name: os.environ.get(name)
                      for name in (*ray_patches.SETTINGS_ENV, ray_worker_main.WORKERS_ENV, fork_client.ENV)}
    os.environ.update(ray_patches.SETTINGS_ENV)
    patched = ray_patches.apply(ray_patches.start_replacements(
        worker_path=str(Path(__file__).with_name("ray_worker_main.py")),
        agent_stub=str(Path(__file__).with_name("ray_agent_stub.py"))))
    ray_patches.lazy_pydantic()  # the workers' own is in ray_worker_main, their entry point
    try:
        with loopback_connection():
            yield
    finally:
        ray_patches.restore(patched)
        for name, value in environ_before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def loopback_connection() -> Iterator[None]:
    """While this process connects to a single-machine cluster: Ray's single-machine flag on in it
    (it read the flag at import: 127.0.0.1 then stays 127.0.0.1, not the machine's IP) and Ray's
    token-setup notice silenced; both as they were after."""
    loopback_before = ray_patches.set_single_machine(True)
    notice = logging.getLogger(ray_private.TOKEN_NOTICE_LOGGER)
    level = notice.level
    notice.setLevel(logging.ERROR)
    try:
        yield
    finally:
        notice.setLevel(level)
        if loopback_before is not None:
            ray_patches.set_single_machine(loopback_before)


def _check_loopback(node: object) -> None:
    """Warn where the embedded cluster's node is not on loopback (a Ray without the single-machine
    flag, set before Ray was imported: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps it there)."""
    address = getattr(node, "node_ip_address", "127.0.0.1")
    if not address.startswith("127."):
        logging.getLogger("trainkit").warning(
            "the embedded Ray cluster listens on %s, not only on loopback (Ray %s has no single-machine flag "
            "trainkit can set): set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before Ray is imported to keep it there",
            address, ray_patches.ray_version())


@contextlib.contextmanager
def fork_server_ahead(framework: type[BackendConfig] | None,
                      attaching: Callable[[], bool] = lambda: False) -> Iterator[None]:
    """Start the embedded cluster's fork server for ``framework`` now, where ``ensure_ray`` called
    now would start one (Ray not connected, no ``RAY_ADDRESS``, not ``attaching`` a runtime plugin's
    cluster): its
    framework import, the cluster start's longest step, then overlaps what the driver does before
    ``ensure_ray`` (importing Ray, checking the run's inputs, its storage). ``ensure_ray`` takes it;
    one it did not take (the run failed before, or attached elsewhere) is stopped on leaving."""
    global _ahead
    started = None
    with _starting:
        if framework is not None and _ahead is None and _forks_workers() and not _ray_connected() \
                and not os.environ.get("RAY_ADDRESS") and not attaching():
            start_fork_server(framework)
            started = _fork_server
            _ahead = (framework, started, threading.get_ident())  # (it dies with this thread)
    try:
        yield
    finally:
        with _starting:
            if started is not None and _ahead is not None and _ahead[1] is started:  # not taken: stop it
                _ahead = None
                stop_fork_server()


def _ray_connected() -> bool:
    ray = sys.modules.get("ray")  # not imported: not connected (and not imported here for the answer)
    return ray is not None and ray.is_initialized()


def _forks_workers() -> bool:
    """An embedded cluster's workers may fork from a fork server (on unless turned off; it needs Ray's
    worker entry point patched, which ``ensure_ray`` checks once Ray is imported)."""
    return ray_patches.switched_on() and ray_patches.tested_release() and os.environ.get(FORK_WORKERS, "1") != "0"


def _fork_server_address() -> str:
    return str(private_dir() / f"workers-{os.getpid()}.sock")


def start_fork_server(framework: type[BackendConfig]) -> str:
    """Start the embedded cluster's fork server with ``framework.prewarm_modules`` imported
    (``forkserver.py``); returns its socket's path. Each of the cluster's Python workers is then a
    fork of it (``ray_worker_main.py``): a fresh process that does not import the framework again.
    It loads with the OMP_NUM_THREADS Ray gives a worker of one CPU (1) where this process sets
    none; each forked worker runs ``framework.after_fork`` (whatever trainer it serves). It dies with this process (the thread that calls this, as Ray's own processes do)
    and stops with the cluster."""
    global _fork_server
    stop_fork_server()  # the previous cluster's (the user's ray.shutdown() stopped that cluster)
    for left in private_dir().glob("workers-*.sock"):  # the sockets of drivers killed before their stop
        pid = left.name[len("workers-"):-len(".sock")]
        if pid.isdigit() and not watchdog.identities([int(pid)]):
            left.unlink(missing_ok=True)
    address = _fork_server_address()
    _fork_server = forkserver.spawn(address, framework.prewarm_modules, fork_server_env(framework))
    return address


def fork_server_env(framework: type[BackendConfig] | None) -> dict[str, str]:
    """A fork server's environment: this process's, with the OMP_NUM_THREADS a worker of one CPU or
    less has where this one sets none (Ray's and torchrun's default: 1), and the class whose
    ``after_fork`` its forked children run (``framework``'s; None, or a class not importable by its
    name: none)."""
    importable = framework is not None and "<locals>" not in framework.__qualname__
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            fork_child.AFTER_FORK_ENV: f"{framework.__module__}:{framework.__qualname__}" if importable else ""}


def stop_fork_server() -> None:
    """Stop the embedded cluster's fork server (``start_fork_server``), once its cluster stopped."""
    global _fork_server
    if _fork_server is not None:
        if _fork_server.poll() is None:
            _fork_server.kill()  # (its forks are Ray's workers: the raylet ends them)
            _fork_server.wait()
        Path(_fork_server_address()).unlink(missing_ok=True)
    _fork_server = None


FORK_WORKERS = "TRAINKIT_FORK_WORKERS"  # "0": the embedded cluster's workers start as fresh interpreters
_fork_server: subprocess.Popen | None = None  # the embedded cluster's (start_fork_server)
_ahead: tuple[type[BackendConfig], subprocess.Popen, int] | None = None  # fork_server_ahead's (framework, server, thread), until ensure_ray takes it
_starting = threading.RLock()  # one thread at a time starts (or decides to start) the embedded cluster
_embedded_node = None  # the node of the cluster ensure_ray started in this process
_attached: tuple[object, AttachedCluster] | None = None  # (this process's node object, the cluster) once attached


def _attached_to(cluster: AttachedCluster) -> None:
    """This process connected to ``cluster`` (a runtime plugin's ``trainkit_attach_cluster``)."""
    global _attached
    _attached = (ray_private.global_node(), cluster)
    atexit.register(_leave_attached)  # before Ray's own exit hook (atexit is LIFO)


def _leave_attached() -> None:
    """Disconnect from an attached cluster at exit without Ray's exit hook's 0.5 s sleep (for log
    lines the driver never shows: ``log_to_driver=False``); the cluster stays up."""
    import ray

    if ray.is_initialized() and attached_cluster() is not None:
        ray.shutdown()


def attached_cluster() -> AttachedCluster | None:
    """The cluster a runtime plugin attached this process to, while connected to it."""
    node = ray_private.global_node()
    return _attached[1] if _attached is not None and node is not None and node is _attached[0] else None


def own_cluster() -> object | None:
    """A token of the single-machine cluster trainkit runs on (the embedded one this process
    started, or one a runtime plugin attached it to), None on any other cluster (``RAY_ADDRESS``)."""
    node = ray_private.global_node()
    attached = _attached[0] if _attached is not None else None
    return node if node is not None and (node is _embedded_node or node is attached) else None
_VITAL = ("gcs_server", "raylet")  # Ray's process types without which the embedded cluster is gone


def embedded_cluster_down() -> str | None:
    """Which of the embedded cluster's own vital processes (the GCS, the raylet: this process's
    children) has ended and how, or None while they run; on an attached cluster, its ``down()``
    (None too on any other cluster)."""
    import signal

    node = own_cluster()
    if (attached := attached_cluster()) is not None:
        return attached.down()
    processes = ray_private.node_processes(node)
    for kind in _VITAL:
        for info in processes.get(kind, []):
            code = info.process.poll()
            if code is None:
                continue
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
            return f"the embedded Ray cluster's {kind} (pid {info.process.pid}) {how}"
    return None


def embedded_node() -> object | None:
    """The node of the embedded cluster when this process started the one it is connected to."""
    node = ray_private.global_node()
    return node if node is not None and node is _embedded_node else None


def check_can_ever_place(scaling) -> None:
    """On the embedded cluster (no node joins it later), workers that need more of a resource than
    the machine has fail now, naming it, not after the placement timeout."""
    import ray

    if own_cluster() is None:
        return
    total = ray.cluster_resources()
    short = {k: v for k, v in scaling.worker_resources.items() if v and total.get(k, 0) < v}
    if not short:
        return
    needs = ", ".join(f"{k}={v:g} (the machine has {total.get(k, 0):g})" for k, v in short.items())
    hint = (" use_gpu=True needs a GPU, and Ray found none on this machine: set use_gpu=False, or run on a"
            " cluster with GPUs (RAY_ADDRESS)." if "GPU" in short and scaling.use_gpu else
            " Lower resources_per_worker, or run on a cluster that has them (RAY_ADDRESS).")
    raise ValueError(f"ScalingConfig: each worker needs {needs}, so no worker can ever start here.{hint}")


def _private_auth_token() -> None:
    """Ray's token for a new local cluster (``~/.ray/auth_token``), created 0600 before Ray would
    create it 0644; an existing one of this user's is made 0600. Ray releases without token
    authentication are left alone."""
    auth = ray_private.token_auth()
    if auth is None or os.environ.get("RAY_AUTH_MODE", "token").lower() != "token" or os.environ.get("RAY_AUTH_TOKEN"):
        return
    path, new_token = auth
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        # written whole beside it, then linked into place: drivers starting at the same moment find
        # one token, whole, never an empty file
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(new_token())
        try:
            os.link(partial, path)
        except FileExistsError:
            pass
        finally:
            partial.unlink()
    if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o077:
        path.chmod(0o600)


def watch_embedded_cluster(on_down: Callable[[str], None], every_s: float = 0.5) -> Callable[[], None]:
    """Call ``on_down(what)`` once, from a thread, when the embedded cluster's GCS or raylet ends
    (``embedded_cluster_down``): the driver's main thread may then be stuck in a call to the dead
    GCS, which Ray ends by ending this process 60 s later. Returns what stops the watch."""

    stopped = threading.Event()

    def watch() -> None:
        while not stopped.wait(every_s):
            if (down := embedded_cluster_down()) is not None:
                on_down(down)
                return

    if own_cluster() is not None:
        threading.Thread(target=watch, name="trainkit-cluster-watch", daemon=True).start()
    return stopped.set


def abandon_embedded_cluster() -> None:
    """The embedded cluster lost its GCS or raylet (``embedded_cluster_down``): end what is left of
    it and disconnect, asking the dead processes nothing (each such call waits for an answer that
    never comes, and Ray would end this process once it gives up on its GCS, 60 s later). The next
    fit starts a fresh cluster."""
    import ray

    ray_patches.kill_now(embedded_node())
    ray.shutdown()
    stop_fork_server()
    watchdog.stop()


def stop_embedded_cluster() -> None:
    """Stop the cluster ``ensure_ray`` started: all its processes at once where patched
    (``ray_patches.stop_in_parallel``), else as Ray's own exit hook would."""
    import ray

    node = ray_private.global_node()
    if not ray.is_initialized() or not ray_private.node_processes(node):
        return
    ray_patches.stop_in_parallel(node)
    ray.shutdown()
    stop_fork_server()
    watchdog.stop()
