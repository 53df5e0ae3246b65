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

Ray internals: to start and stop faster and to drop one console warning, trainkit patches a few
of Ray's private functions while it starts the embedded cluster (the pyproject bounds Ray to the
releases tested with them): no autoscaler monitor, log monitor or API server; stand-ins for the
two per-node agents (``ray_agent_stub.py``: no dashboard agent, the runtime env agent on first
use); 20 ms socket retries; a worker entry point that imports pydantic only when used and starts
the worker forked from a fork server that imported the framework once for the cluster
(``ray_worker_main.py``, ``start_fork_server``); a 20 ms poll for the raylet's registration; a parallel stop at exit.
``TRAINKIT_RAY_PATCHES=0`` turns them off: Ray's own code paths, slower, everything else the same
(loopback, private files and the cluster's own session included).

Own session: the embedded cluster's processes are not in the driver's process group (see
``_always_patches``), so a signal to that group stops the driver's run before the cluster.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterator
from pathlib import Path

from trainkit._internal.cluster import forkserver, ray_worker_main, watchdog
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
    launch`` (``forkserver.ENV``)."""
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
    patched = _patched()
    if patched:
        _hide_worker_pool_warning()
    if os.environ.get("RAY_ADDRESS"):
        ray.init(**quiet)
        return
    if attach is not None and (cluster := attach(dict(quiet))) is not None:
        _attached_to(ray, cluster)
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not _forks_workers():
        framework = None
    # single-machine mode for the cluster's own processes, which inherit it as ray.init starts them;
    # then this process's environment is as it was: a `ray start` it runs later (a node of a real
    # cluster) must not inherit it, or Ray refuses to join ("not supported on Windows and OSX")
    single_machine = os.environ.get(SINGLE_MACHINE), ray._private.ray_constants.ENABLE_RAY_CLUSTER
    os.environ[SINGLE_MACHINE] = "0"
    ray._private.ray_constants.ENABLE_RAY_CLUSTER = False  # this process read the flag at import
    _private_auth_token()
    notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
    level = notice.level
    notice.setLevel(logging.ERROR)
    patches = [*_start_patches(ray), *_always_patches(ray)] if patched else _always_patches(ray)
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, replacement in patches:
        setattr(owner, name, replacement)
    # Ray starts its workers at nice 15. Where the kernel weighs processes against each other rather
    # than by session (a container, a Kubernetes pod, a systemd service: no autogroup), a rank beside
    # one busy nice-0 process gets 36/1060 of a core (CFS weights), where a torchrun rank gets half
    # (measured here in one CPU cgroup on one core: a fixed loop took 44.8 s at nice 15, 2.3 s at 0).
    # The embedded cluster's workers, and what they start, keep the driver's priority.
    init_kwargs["_system_config"] = {"worker_niceness": 0, **(_FAST_SOCKET_RETRIES if patched else {}),
                                     **(_FORKING if framework or os.environ.get(ray_worker_main.WORKERS_ENV) else {}),
                                     **(init_kwargs.get("_system_config") or {})}
    if patched:
        ray_worker_main.lazy_pydantic()  # the workers' own is in ray_worker_main, their entry point
    # the fork server loads while Ray starts; the raylet, so its workers, inherit its address
    fork_env = (ray_worker_main.WORKERS_ENV, forkserver.ENV)
    environ_before = {name: os.environ.get(name) for name in fork_env}
    try:
        if framework is not None:
            ahead, _ahead = _ahead, None  # this thread's, for this framework and still up: taken
            address = _fork_server_address() if ahead == (framework, _fork_server, threading.get_ident()) \
                and _fork_server.poll() is None else start_fork_server(framework)
            os.environ[ray_worker_main.WORKERS_ENV] = address
            if scripts:
                os.environ[forkserver.ENV] = address
        # address="local": an embedded cluster, never one that `ray start` (or another process's
        # test cluster) recorded in /tmp/ray; a cluster is joined only through RAY_ADDRESS.
        ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1",
                 _temp_dir=str(private_dir() / "ray"), **quiet, **init_kwargs)
    except BaseException:
        stop_fork_server()
        raise
    finally:
        notice.setLevel(level)
        for owner, name, original in originals:
            setattr(owner, name, original)
        environ, ray._private.ray_constants.ENABLE_RAY_CLUSTER = single_machine
        for name, value in {SINGLE_MACHINE: environ, **environ_before}.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    global _embedded_node
    _embedded_node = ray._private.worker._global_node
    if patched:
        atexit.register(_stop_embedded_cluster)  # runs before Ray's own exit hook (atexit is LIFO)
    node = getattr(ray._private.worker, "_global_node", None)
    processes = getattr(node, "all_processes", None) or {}
    watchdog.start([info.process.pid for infos in processes.values() for info in infos]
                   + ([_fork_server.pid] if _fork_server is not None else []))


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
    """An embedded cluster's workers fork from a fork server (on unless turned off)."""
    return _patched() and os.environ.get(FORK_WORKERS, "1") != "0"


def _patched() -> bool:
    """Ray's internals patched to start fast (the module docstring; ``TRAINKIT_RAY_PATCHES=0``: not)."""
    return os.environ.get("TRAINKIT_RAY_PATCHES", "1").lower() not in ("0", "false", "no")


def _fork_server_address() -> str:
    return str(private_dir() / f"workers-{os.getpid()}.sock")


def start_fork_server(framework: type[BackendConfig]) -> str:
    """Start the embedded cluster's fork server with ``framework.prewarm_modules`` imported
    (``forkserver.py``); returns its socket's path. Each of the cluster's Python workers is then a
    fork of it (``ray_worker_main.py``): a fresh process that does not import the framework again.
    It loads with the OMP_NUM_THREADS Ray gives a worker of one CPU (1) where this process sets
    none; a worker that Ray gives more calls ``framework.follow_thread_count`` (whatever trainer it
    serves). It dies with this process (the thread that calls this, as Ray's own processes do)
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
    less has where this one sets none (Ray's and torchrun's default: 1), and what a forked worker
    Ray gives more calls (``framework.follow_thread_count``; None: nothing)."""
    follow = framework.follow_thread_count if framework is not None else None
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            forkserver.FOLLOW_ENV: f"{follow.__module__}:{follow.__qualname__}" if follow else ""}


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


def _attached_to(ray, cluster: AttachedCluster) -> None:
    """This process connected to ``cluster`` (a runtime plugin's ``trainkit_attach_cluster``)."""
    global _attached
    _attached = (ray._private.worker._global_node, cluster)
    if _patched():
        atexit.register(_leave_attached)  # before Ray's own exit hook (atexit is LIFO)


def _leave_attached() -> None:
    """Disconnect from an attached cluster at exit without Ray's exit hook's 0.5 s sleep (for log
    lines the driver never shows: ``log_to_driver=False``); the cluster stays up."""
    import ray

    if ray.is_initialized() and attached_cluster() is not None:
        ray.shutdown()


def attached_cluster() -> AttachedCluster | None:
    """The cluster a runtime plugin attached this process to, while connected to it."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    return _attached[1] if _attached is not None and node is not None and node is _attached[0] else None


def own_cluster() -> object | None:
    """A token of the single-machine cluster trainkit runs on (the embedded one this process
    started, or one a runtime plugin attached it to), None on any other cluster (``RAY_ADDRESS``)."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
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
    processes = getattr(node, "all_processes", None) or {}
    for kind in _VITAL:
        for info in processes.get(kind, []):
            code = info.process.poll()
            if code is None:
                continue
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
            return f"the embedded Ray cluster's {kind} (pid {info.process.pid}) {how}"
    return None
SINGLE_MACHINE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's single-machine mode, servers on loopback


def _start_patches(ray) -> list[tuple[object, str, object]]:
    """(owner, attribute, replacement) for the embedded cluster's start, each only where this Ray
    release has what it replaces (see the module docstring)."""
    services, node_cls, utils = ray._private.services, ray._private.node.Node, ray._private.utils
    patches = [(services, "get_node", _polling_get_node(ray, services.get_node)),
               (node_cls, "__init__", _lean_node_init(node_cls.__init__)),
               (node_cls, "start_api_server", lambda self, **_: None)]  # no dashboard/job API: trainkit uses neither
    if hasattr(ray._raylet, "wait_for_persisted_port"):  # agents report their ports in files (not Ray 2.40)
        patches.append((services, "start_ray_process", _lean_raylet(services.start_ray_process)))
        if hasattr(utils, "get_dashboard_dependency_error"):  # it only picks flags for the agent replaced
            patches.append((utils, "get_dashboard_dependency_error", lambda: None))
    return patches


def _always_patches(ray) -> list[tuple[object, str, object]]:
    """The embedded cluster's processes (GCS, raylet, and through the raylet its workers and agents)
    start in a session of their own: a signal to the driver's process group (Slurm's SIGTERM, the
    terminal's SIGHUP or Ctrl-C) reaches the driver alone, which stops its run cleanly and then the
    cluster. Ray's fate sharing still holds: they are SIGKILLed when the driver thread that started
    them ends (``PR_SET_PDEATHSIG``), and the watchdog reaps what they started."""
    services = ray._private.services

    class OwnSessionPopen(services.ConsolePopen):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    return [(services, "ConsolePopen", OwnSessionPopen)]


def embedded_node() -> object | None:
    """The node of the embedded cluster when this process started the one it is connected to."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
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
    try:
        from ray._private.authentication.authentication_token_generator import generate_new_authentication_token
        from ray._private.authentication.authentication_token_setup import _get_default_token_path
    except ImportError:
        return
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token" or os.environ.get("RAY_AUTH_TOKEN"):
        return
    path = _get_default_token_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        # written whole beside it, then linked into place: drivers starting at the same moment find
        # one token, whole, never an empty file
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(generate_new_authentication_token())
        try:
            os.link(partial, path)
        except FileExistsError:
            pass
        finally:
            partial.unlink()
    if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o077:
        path.chmod(0o600)


def _hide_worker_pool_warning() -> None:
    """The raylet warns on the driver's console when it starts more Python workers than 4x the
    machine's cores (16 workers with fractional CPUs on 2 cores): for a trainer that asked for
    exactly that, the warning is noise. Every other raylet message still prints."""
    import ray._private.worker as ray_worker

    shown = ray_worker.print_to_stdstream
    if getattr(shown, "trainkit_filtered", False):
        return

    def print_to_stdstream(data, ignore_prefix):
        lines = [line for line in data.get("lines", []) if "worker processes have been started" not in line]
        if lines:
            shown({**data, "lines": lines}, ignore_prefix)

    print_to_stdstream.trainkit_filtered = True
    ray_worker.print_to_stdstream = print_to_stdstream


def _lean_node_init(full_init):
    """An embedded single-machine cluster needs neither Ray's autoscaler monitor (fixed resources)
    nor its log monitor (trainkit forwards worker output itself). On 2 cores their start-up competes
    with everything else: dropping them and the API server takes ``ray.init`` from 2.3-3.2 s to 1.7 s.
    Its workers start from ``ray_worker_main.py`` (Ray's worker, without pydantic unless imported)."""

    def init(self, ray_params, *args, **kwargs):
        ray_params.no_monitor = True
        ray_params.include_log_monitor = False
        ray_params.worker_path = str(Path(__file__).with_name("ray_worker_main.py"))
        full_init(self, ray_params, *args, **kwargs)

    return init


# A raylet connects to its own object store's socket while another thread of it is still creating
# that socket; it then sleeps 1 s (Ray's default) before the next try: 1 s added to every 12th
# start on a quiet machine, to most starts on a busy one. 20 ms tries, the same 10 s in all.
_FAST_SOCKET_RETRIES = {"raylet_client_connect_timeout_milliseconds": 20, "raylet_client_num_connect_attempts": 500}

# Where workers fork, a worker registers once the fork server loaded the framework (it loads while
# Ray starts): no prestarted worker for the first driver, whose ray.init waited for one (0.6 -> 3 s),
# and room for that load on a busy machine in Ray's 60 s for a worker to register (then it is killed).
_FORKING = {"prestart_worker_first_driver": False, "worker_register_timeout_seconds": 180}

_UNUSED_AGENT_PORTS = ("dashboard_agent_listen_port", "metrics_agent_port", "metrics_export_port")


def _lean_raylet(start_ray_process):
    """The raylet of an embedded cluster starts stand-ins (``ray_agent_stub.py``) for Ray's two
    per-node agents, which cost 1.2 s of CPU at every start and which the raylet waits for (their
    ports) before it registers. The dashboard agent serves the dashboard, metrics and log APIs, none
    of which the embedded cluster runs (without ``ray[default]`` it loads no module at all): its
    ports are written as "not in use" (-1, what Ray's own minimal agent writes). The runtime env
    agent is started on first use: ``runtime_env`` works as usual, a first use waits for it once."""

    def start(command, process_type, *args, **kwargs):
        flags = dict(arg[2:].split("=", 1) for arg in command if arg.startswith("--") and "=" in arg) \
            if process_type == "raylet" else {}
        if {"session_dir", "node_id", "dashboard_agent_command", "runtime_env_agent_command"} <= flags.keys():
            for name in _UNUSED_AGENT_PORTS:
                Path(flags["session_dir"], f"{name}_{flags['node_id']}").write_text("-1")
            stub = subprocess.list2cmdline([sys.executable, "-S", str(Path(__file__).with_name("ray_agent_stub.py"))])
            command = [_with_agent_stub(arg, stub) for arg in command]
        return start_ray_process(command, process_type, *args, **kwargs)

    return start


def _with_agent_stub(arg: str, stub: str) -> str:
    dashboard, runtime_env = "--dashboard_agent_command=", "--runtime_env_agent_command="
    if arg.startswith(dashboard):
        return dashboard + stub
    if arg.startswith(runtime_env):
        return f"{runtime_env}{stub} --on-first-use {arg[len(runtime_env):]}"
    return arg


def _polling_get_node(ray, slow_get_node):
    """``ray.init`` waits for its raylet to register by asking the GCS in 1-second sleeps, so a
    raylet ready after 0.7 s costs 1 s (1.5 s costs 2 s). Polling the node table every 20 ms first
    makes that wait end when the raylet is ready. Any surprise falls back to Ray's own call."""

    def get_node(gcs_address, node_id):
        try:
            state = ray._private.state.GlobalState()
            state._initialize_global_state(ray._private.services._get_gcs_client_options(gcs_address))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(n.get("NodeID") == node_id for n in state.node_table()):
                time.sleep(0.02)
        except Exception:  # noqa: BLE001 - Ray's internals moved: its own wait still works
            pass
        return slow_get_node(gcs_address, node_id)

    return get_node


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

    node = embedded_node()
    for infos in (getattr(node, "all_processes", None) or {}).values():
        for info in infos:
            if info.process.poll() is None:
                info.process.kill()
    if node is not None:
        node.kill_all_processes = lambda *_args, **_kwargs: None  # all gone, or going
    ray.shutdown()
    stop_fork_server()
    watchdog.stop()


def _stop_embedded_cluster() -> None:
    """Stop the cluster ``ensure_ray`` started, all processes at once.

    Ray's exit hook sleeps 0.5 s, then stops its processes one after another with up to 1 s of
    grace each: about 2 s added to every script's exit. Here the raylet goes first (it stops its
    workers and agents), then the rest together with a short grace. Falls back to Ray's own path if
    its internals change.
    """
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    processes = getattr(node, "all_processes", None)
    if not ray.is_initialized() or not isinstance(processes, dict):
        return
    raylet = [info.process for info in processes.get("raylet", [])]
    others = [info.process for kind, infos in processes.items() if kind != "raylet" for info in infos]

    def stop(group: list[subprocess.Popen], grace_s: float) -> None:
        alive = [p for p in group if p.poll() is None]
        for p in alive:
            p.terminate()
        deadline = time.monotonic() + grace_s
        for p in alive:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=1.0)

    def kill_all(*_args, **_kwargs) -> None:
        stop(raylet, grace_s=1.0)  # first and alone: it stops its workers and agents while the GCS is still up
        stop(others, grace_s=0.2)  # nothing of an embedded cluster outlives it

    node.kill_all_processes = kill_all
    ray.shutdown()
    stop_fork_server()
    watchdog.stop()
