"""Every change trainkit makes to Ray's own code, in one place, each gated.

The embedded cluster starts and stops faster with a few of Ray's private functions replaced (see
each replacement's docstring). They are an optimisation, never a requirement: a patch is applied
only where

- the switch is on (``TRAINKIT_RAY_PATCHES`` unset or ``1``; ``0`` turns every patch off),
- the running Ray is one of the releases it was tested on (``PATCHES``; outside them trainkit says
  so once, at INFO on the ``trainkit`` logger, and runs on Ray's own code paths), and
- its target exists and takes the parameters the replacement relies on (else it stays off).

Outside those, Ray's own code runs: slower, otherwise the same. Two *settings* are kept apart from
the patches: they hold a promise rather than save time, and they are values Ray reads from its own
environment variables (``SETTINGS_ENV``: the embedded cluster's servers bind loopback only, its
workers keep the driver's priority), which Ray ignores where it does not know them. So neither the
switch nor the tested releases turn them off. The driver read the single-machine flag when it
imported Ray, so it is also set in this process where Ray has it (``set_single_machine``);
``ray_runtime`` checks the loopback promise after the start.

This module imports nothing of trainkit: a worker's entry script (``ray_worker_main.py``) loads it
by its path.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

SWITCH = "TRAINKIT_RAY_PATCHES"
TESTED_RAY = ("2.40.0", "2.60.0")  # core's test matrix: the oldest supported release and the newest

# name -> (target as ``module:attribute.path`` ("": none, a _system_config key), the leading parameters
# the replacement relies on (None: a class, taken as a base), the Ray releases it was tested on)
PATCHES: dict[str, tuple[str, tuple[str, ...] | None, tuple[str, str]]] = {
    "poll_raylet_registration": ("ray._private.services:get_node", ("gcs_address", "node_id"), TESTED_RAY),
    "lean_node": ("ray._private.node:Node.__init__", ("self", "ray_params"), TESTED_RAY),
    "no_api_server": ("ray._private.node:Node.start_api_server", ("self",), TESTED_RAY),
    "agent_stand_ins": ("ray._private.services:start_ray_process", ("command", "process_type"), TESTED_RAY),
    "no_dashboard_dependency_check": ("ray._private.utils:get_dashboard_dependency_error", (), TESTED_RAY),
    "own_session": ("ray._private.services:ConsolePopen", None, TESTED_RAY),
    "quiet_worker_pool_warning": ("ray._private.worker:print_to_stdstream", ("data", "ignore_prefix"), TESTED_RAY),
    "lazy_pydantic": ("ray.util.serialization_addons:apply", ("serialization_context",), TESTED_RAY),
    "parallel_stop": ("ray._private.node:Node.kill_all_processes", ("self",), TESTED_RAY),
    # _system_config keys: Ray refuses a key it does not know, so they go with the releases that have them
    "fast_socket_retries": ("", (), TESTED_RAY),
    "forked_workers": ("", (), TESTED_RAY),
}
# what a patch needs beside its target: the stand-ins need agents that report their ports in files
# (not Ray 2.40, whose raylet reads them from its command line)
REQUIRES = {"agent_stand_ins": "ray._raylet:wait_for_persisted_port",
            "no_dashboard_dependency_check": "ray._raylet:wait_for_persisted_port"}
# The settings, as the environment variables Ray reads as its processes start. Ray starts its workers
# at nice 15: where the kernel weighs processes against each other rather than by session (a
# container, a Kubernetes pod, a systemd service: no autogroup), a rank beside one busy nice-0
# process gets 36/1060 of a core (CFS weights), where a torchrun rank gets half (measured here in one
# CPU cgroup on one core: a fixed loop took 44.8 s at nice 15, 2.3 s at 0). Ray's job manager sets
# the same variable for its jobs' drivers.
SETTINGS_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_worker_niceness": "0"}
_SINGLE_MACHINE = "ray._private.ray_constants:ENABLE_RAY_CLUSTER"  # the flag as this process read it

logger = logging.getLogger("trainkit")
_noted: set[str] = set()


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("+")[0].split(".")[:3] if part.isdigit())


def ray_version() -> str:
    """The running Ray's version: ``ray.__version__`` once imported, else its installed metadata's
    (so asking does not import Ray)."""
    if (ray := sys.modules.get("ray")) is not None:
        return getattr(ray, "__version__", "0")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ray")
    except PackageNotFoundError:
        return "0"


def tested_release() -> bool:
    """Whether the running Ray is one the patches were tested on (``TESTED_RAY``)."""
    return _tested(TESTED_RAY)


def switched_on() -> bool:
    return os.environ.get(SWITCH, "1").lower() not in ("0", "false", "no", "off")


def _tested(tested: tuple[str, str]) -> bool:
    first, last = tested
    return _version(first) <= _version(ray_version()) <= _version(last)


def _resolve(target: str) -> tuple[Any, str] | None:
    """(owner, attribute) of ``module:Attr.path``, or None where this Ray has no such thing."""
    module_name, _, path = target.partition(":")
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError:
        return None
    *parents, attribute = path.split(".")
    for name in parents:
        owner = getattr(owner, name, None)
    return (owner, attribute) if owner is not None and hasattr(owner, attribute) else None


def _takes(value: Any, params: tuple[str, ...] | None) -> bool:
    if params is None:
        return isinstance(value, type)
    try:
        names = list(inspect.signature(value).parameters)
    except (TypeError, ValueError):
        return False
    return names[:len(params)] == list(params)


def enabled(name: str) -> bool:
    """Whether patch ``name`` applies here (the switch, the tested releases, its target)."""
    if not switched_on():
        return False
    target, params, tested = PATCHES[name]
    if not _tested(tested):
        _note_untested()
        return False
    if not target:
        return True
    if name in REQUIRES and _resolve(REQUIRES[name]) is None:
        return False  # a release the patch has nothing to do on
    found = _resolve(target)
    if found is None:
        logger.debug("Ray %s has no %s: trainkit's %s patch stays off", ray_version(), target, name)
        return False
    if not _takes(getattr(*found), params):
        _note_once(name, f"Ray {ray_version()}'s {target} is not what trainkit's {name} patch was written "
                         "for: that patch stays off")
        return False
    return True


def _note_untested() -> None:
    first, last = TESTED_RAY
    _note_once("untested", f"Ray {ray_version()} is outside the releases trainkit's Ray patches were tested "
                           f"on ({first} to {last}): the embedded cluster runs on Ray's own code paths")


def _note_once(key: str, message: str) -> None:
    if key not in _noted:
        _noted.add(key)
        logger.info(message)


def apply(replacements: dict[str, Callable[[Any], Any]]) -> list[tuple[Any, str, Any]]:
    """Apply each enabled patch ``name -> make(original)``; returns what ``restore`` puts back."""
    done = []
    for name, make in replacements.items():
        if enabled(name):
            owner, attribute = _resolve(PATCHES[name][0])
            original = getattr(owner, attribute)
            done.append((owner, attribute, original))
            setattr(owner, attribute, make(original))
    return done


def restore(done: list[tuple[Any, str, Any]]) -> None:
    for owner, attribute, original in reversed(done):
        setattr(owner, attribute, original)


# -- settings ---------------------------------------------------------------------------------------
def set_single_machine(on: bool) -> bool | None:
    """Set Ray's single-machine flag in this process (True: servers on loopback) where this Ray has
    it; returns the value it had (None: no such flag, nothing set)."""
    found = _resolve(_SINGLE_MACHINE)
    if found is None or not isinstance(getattr(*found), bool):
        return None
    before = not getattr(*found)  # the flag says "clusters enabled": loopback is its opposite
    setattr(*found, not on)
    return before


def system_config(forking: bool) -> dict[str, Any]:
    """The patches' part of the embedded cluster's ``_system_config`` (Ray refuses a key it does not
    know, so each goes with the releases it was tested on)."""
    config: dict[str, Any] = {}
    if enabled("fast_socket_retries"):
        config.update(_FAST_SOCKET_RETRIES)
    if forking and enabled("forked_workers"):
        config.update(_FORKING)
    return config


# A raylet connects to its own object store's socket while another thread of it is still creating
# that socket; it then sleeps 1 s (Ray's default) before the next try: 1 s added to every 12th
# start on a quiet machine, to most starts on a busy one. 20 ms tries, the same 10 s in all.
_FAST_SOCKET_RETRIES = {"raylet_client_connect_timeout_milliseconds": 20, "raylet_client_num_connect_attempts": 500}

# Where workers fork, a worker registers once the fork server loaded the framework (it loads while
# Ray starts): no prestarted worker for the first driver, whose ray.init waited for one (0.6 -> 3 s),
# and room for that load on a busy machine in Ray's 60 s for a worker to register (then it is killed).
_FORKING = {"prestart_worker_first_driver": False, "worker_register_timeout_seconds": 180}


# -- the replacements -------------------------------------------------------------------------------
def start_replacements(worker_path: str, agent_stub: str) -> dict[str, Callable[[Any], Any]]:
    """The patches in force while the embedded cluster starts: name -> make(original)."""
    return {
        "poll_raylet_registration": _polling_get_node,
        "lean_node": lambda init: _lean_node_init(init, worker_path),
        "no_api_server": lambda _: lambda self, *args, **kwargs: None,  # no dashboard/job API: trainkit uses neither
        "agent_stand_ins": lambda start: _lean_raylet(start, agent_stub),
        "no_dashboard_dependency_check": lambda _: lambda: None,  # it only picks flags for the agent replaced
        "own_session": _own_session_popen,
    }


def _own_session_popen(console_popen: type) -> type:
    """The embedded cluster's processes (GCS, raylet, and through the raylet its workers and agents)
    start in a session of their own: a signal to the driver's process group (Slurm's SIGTERM, the
    terminal's SIGHUP or Ctrl-C) reaches the driver alone, which stops its run cleanly and then the
    cluster. Ray's fate sharing still holds: they are SIGKILLed when the driver thread that started
    them ends (``PR_SET_PDEATHSIG``), and the watchdog reaps what they started."""

    class OwnSessionPopen(console_popen):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("start_new_session", True)
            super().__init__(*args, **kwargs)

    return OwnSessionPopen


def _lean_node_init(full_init: Callable, worker_path: str) -> Callable:
    """An embedded single-machine cluster needs neither Ray's autoscaler monitor (fixed resources)
    nor its log monitor (trainkit forwards worker output itself). On 2 cores their start-up competes
    with everything else: dropping them and the API server takes ``ray.init`` from 2.3-3.2 s to 1.7 s.
    Its workers start from ``worker_path`` (``ray_worker_main.py``: Ray's worker, forked where the
    cluster has a fork server, without pydantic unless imported)."""

    def init(self, ray_params, *args, **kwargs):
        ray_params.no_monitor = True
        ray_params.include_log_monitor = False
        ray_params.worker_path = worker_path
        full_init(self, ray_params, *args, **kwargs)

    return init


_UNUSED_AGENT_PORTS = ("dashboard_agent_listen_port", "metrics_agent_port", "metrics_export_port")


def _lean_raylet(start_ray_process: Callable, agent_stub: str) -> Callable:
    """The raylet of an embedded cluster starts stand-ins (``agent_stub``, ``ray_agent_stub.py``) for
    Ray's two per-node agents, which cost 1.2 s of CPU at every start and which the raylet waits for
    (their ports) before it registers. The dashboard agent serves the dashboard, metrics and log APIs,
    none of which the embedded cluster runs: its ports are written as "not in use" (-1, what Ray's
    own minimal agent writes). The runtime env agent is started on first use: ``runtime_env`` works
    as usual, a first use waits for it once."""
    stub = subprocess.list2cmdline([sys.executable, "-S", agent_stub])

    def start(command, process_type, *args, **kwargs):
        flags = dict(arg[2:].split("=", 1) for arg in command if arg.startswith("--") and "=" in arg) \
            if process_type == "raylet" else {}
        if {"session_dir", "node_id", "dashboard_agent_command", "runtime_env_agent_command"} <= flags.keys():
            for name in _UNUSED_AGENT_PORTS:
                Path(flags["session_dir"], f"{name}_{flags['node_id']}").write_text("-1")
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


def _polling_get_node(slow_get_node: Callable) -> Callable:
    """``ray.init`` waits for its raylet to register by asking the GCS in 1-second sleeps, so a
    raylet ready after 0.7 s costs 1 s (1.5 s costs 2 s). Polling the node table every 20 ms first
    makes that wait end when the raylet is ready. Any surprise falls back to Ray's own call."""
    def get_node(gcs_address, node_id):
        try:
            registered = _ray_private().node_registered(gcs_address)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not registered(node_id):
                time.sleep(0.02)
        except Exception:  # noqa: BLE001 - Ray's internals moved: its own wait still works
            pass
        return slow_get_node(gcs_address, node_id)

    return get_node


def _ray_private() -> Any:
    """``ray_private.py``, loaded by its path where trainkit is not imported (a worker's entry script)."""
    if (loaded := sys.modules.get("trainkit._internal.cluster.ray_private")) is not None:
        return loaded
    import importlib.util

    spec = importlib.util.spec_from_file_location("_trainkit_ray_private", Path(__file__).with_name("ray_private.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def quiet_worker_pool_warning() -> None:
    """The raylet warns on the driver's console when it starts more Python workers than 4x the
    machine's cores (16 workers with fractional CPUs on 2 cores): for a trainer that asked for
    exactly that, the warning is noise. Every other raylet message still prints. Stays for the
    process's life (the raylet's messages come while the cluster runs)."""
    found = _resolve(PATCHES["quiet_worker_pool_warning"][0])
    if found is None or getattr(getattr(*found), "trainkit_filtered", False) \
            or not enabled("quiet_worker_pool_warning"):
        return

    def filtered(shown: Callable) -> Callable:
        def print_to_stdstream(data, ignore_prefix):
            lines = [line for line in data.get("lines", []) if "worker processes have been started" not in line]
            if lines:
                shown({**data, "lines": lines}, ignore_prefix)

        print_to_stdstream.trainkit_filtered = True
        return print_to_stdstream

    apply({"quiet_worker_pool_warning": filtered})


_PYDANTIC_COMPAT = ("ray._common.pydantic_compat", "ray._private.pydantic_compat")  # newer Ray, older Ray


def lazy_pydantic() -> None:
    """Ray gives every process a serializer for pydantic's ``ModelField`` (FastAPI's pydantic-v1
    compatibility type) and imports pydantic to do so: 0.2-0.3 s of CPU in the driver and in every
    worker, before the first task runs, where nothing sends such an object. This keeps Ray's
    behaviour in a process that has imported pydantic already and skips it elsewhere; every other
    serializer is registered as Ray does."""
    found = _resolve(PATCHES["lazy_pydantic"][0])
    if found is None or getattr(getattr(*found), "trainkit_lazy_pydantic", False) or not enabled("lazy_pydantic"):
        return
    compat = next((name for name in _PYDANTIC_COMPAT if _found(name)), None)
    if compat is None:
        return

    def lazy(ray_apply: Callable) -> Callable:
        import types

        no_pydantic = types.ModuleType(compat)
        no_pydantic.register_pydantic_serializers = lambda context: None

        def apply_lazily(context) -> None:
            if "pydantic" in sys.modules or compat in sys.modules:
                return ray_apply(context)
            sys.modules[compat] = no_pydantic  # only while Ray's apply imports it; later imports get Ray's
            try:
                return ray_apply(context)
            finally:
                del sys.modules[compat]

        apply_lazily.trainkit_lazy_pydantic = True
        return apply_lazily

    apply({"lazy_pydantic": lazy})


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def stop_in_parallel(node: Any) -> bool:
    """Have ``node`` (the embedded cluster's) stop its processes at once when Ray stops it: Ray's
    exit hook stops them one after another with up to 1 s of grace each (about 2 s added to every
    script's exit). The raylet goes first (it stops its workers and agents while the GCS is still
    up), then the rest together with a short grace. False: not patched, Ray stops them itself."""
    processes = getattr(node, "all_processes", None)
    if not isinstance(processes, dict) or not enabled("parallel_stop"):
        return False
    raylet = [info.process for info in processes.get("raylet", [])]
    others = [info.process for kind, infos in processes.items() if kind != "raylet" for info in infos]

    def kill_all(*_args, **_kwargs) -> None:
        _stop(raylet, grace_s=1.0)
        _stop(others, grace_s=0.2)  # nothing of an embedded cluster outlives it

    node.kill_all_processes = kill_all
    return True


def _stop(group: list[subprocess.Popen], grace_s: float) -> None:
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


def kill_now(node: Any) -> None:
    """SIGKILL ``node``'s processes, and where patched, have Ray's stop ask them nothing (its cluster
    lost its GCS or raylet: each question would wait for an answer that never comes)."""
    for infos in (getattr(node, "all_processes", None) or {}).values():
        for info in infos:
            if info.process.poll() is None:
                info.process.kill()
    if node is not None and enabled("parallel_stop"):
        node.kill_all_processes = lambda *_args, **_kwargs: None  # all gone, or going

