"""pytest fixtures for trainkit's own tests and plugin authors' tests."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import itertools
import os
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from trainkit._internal.cluster import net
from trainkit._internal.cluster.net import free_ports
from trainkit._internal.worker import spare
from trainkit.backend import BackendConfig
from trainkit.config import RunConfig

_names = itertools.count()
_GRACE_S = 10.0  # how long a guard waits for threads and processes that the test itself started
# How long the process guard waits for the exit of the Ray cluster's processes a test left behind
# (killed actors, workers shutting down): it waits on their exit, so this only bounds a real leak,
# and it is generous because a loaded machine takes its time to end a worker process.
_STOPPING_S = 120.0


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A quiet local Ray instance with 4 logical CPUs for the test module (2 workers x 1 CPU fit twice)."""
    with embedded_cluster() as ray:
        yield ray


@contextlib.contextmanager
def embedded_cluster(framework: type[BackendConfig] | None = None) -> Iterator[Any]:
    """The embedded cluster ``fit()`` starts, with 4 logical CPUs, this process connected to it; its
    workers fork from a server that imported ``framework`` (one that is ``fork_safe``), as
    where that trainer's ``fit()`` starts it. A plugin's conftest may override ``ray_cluster``
    with it so that its tests run on the workers its users get."""
    import ray

    from trainkit._internal.cluster.ray_runtime import ensure_ray, stop_fork_server

    if ray.is_initialized():
        ray.shutdown()
    ensure_ray(framework, num_cpus=4)
    try:
        yield ray
    finally:
        ray.shutdown()
        stop_fork_server()


@contextlib.contextmanager
def simulated_cluster(head_cpus: float = 1, system_config: dict | None = None) -> Iterator[Any]:
    """A multi-node Ray cluster in this machine's processes (``ray.cluster_utils.Cluster``), with
    this process connected to it; add nodes with ``cluster.add_node(num_cpus=..., resources=...,
    labels=...)`` before or during a test, remove them with ``cluster.remove_node(node)``.

    Example::

        with simulated_cluster(head_cpus=2) as cluster:
            cluster.add_node(num_cpus=2)
            cluster.wait_for_nodes()
            ...  # a trainer here spans both nodes
    """
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    head = {"num_cpus": head_cpus, **({"_system_config": system_config} if system_config else {})}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def run_config(tmp_path: Any) -> Callable[..., RunConfig]:
    """``run_config(**kwargs)``: a quiet ``RunConfig`` with a fresh name under ``tmp_path``."""

    def make(**kwargs: Any) -> RunConfig:
        kwargs.setdefault("name", f"run{next(_names)}")
        kwargs.setdefault("storage_path", str(tmp_path / "storage"))
        kwargs.setdefault("verbose", 0)
        return RunConfig(**kwargs)

    return make


def find_free_port() -> int:
    """A TCP port nobody listens on right now, on any interface."""
    return free_ports(1)[0]


@pytest.fixture
def free_port() -> int:
    """A TCP port nobody listens on right now, on any interface."""
    return find_free_port()


# -- leak guards: each fails the test that leaves something behind in the test process ---------------

@pytest.fixture
def preimported_modules() -> tuple[str, ...]:
    """Modules ``no_leaked_env`` imports before its snapshot, so that what they set in ``os.environ``
    when first imported is no leak of whichever test imports them first. Override it (in a
    conftest or a test class) to name a framework that sets variables at import."""
    return ("trainkit._internal.driver.controller",)


@pytest.fixture
def no_leaked_env(preimported_modules: tuple[str, ...]) -> Iterator[None]:
    """Fails a test that adds, changes or removes environment variables of the test process
    (imports of ``preimported_modules`` first, so a test's place in the order does not matter)."""
    for name in preimported_modules:
        with contextlib.suppress(ImportError):  # an optional module of the framework (e.g. deepspeed)
            importlib.import_module(name)
    before = dict(os.environ)
    yield
    after = dict(os.environ)
    changed = sorted(k for k in before.keys() | after.keys()
                     if before.get(k) != after.get(k) and k != "PYTEST_CURRENT_TEST")  # pytest's own
    if changed:
        for key in changed:
            if key in before:
                os.environ[key] = before[key]
            else:
                del os.environ[key]
        pytest.fail(f"the test leaked environment variables: {', '.join(changed)} (restored)")


def _wait_until_gone(find: Callable[[], list], grace_s: float | None = None) -> list:
    deadline = time.monotonic() + (_GRACE_S if grace_s is None else grace_s)
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def no_leaked_threads() -> Iterator[None]:
    """Fails a test whose threads are still running ``_GRACE_S`` seconds after it ends."""
    before = set(threading.enumerate())
    yield
    left = _wait_until_gone(lambda: [t for t in threading.enumerate() if t not in before and t.is_alive()])
    if left:
        pytest.fail(f"the test leaked threads: {', '.join(sorted(t.name for t in left))}")


def _ray_owned(process: Any) -> bool:
    """Ray keeps a pool of idle worker processes under its raylet; those are Ray's, not a leak. A
    forked worker's stand-in (``ray_worker_main.py``, the process Ray started) ends with its worker,
    which is what is judged."""
    try:
        args = process.cmdline()
        return process.name().startswith("ray::IDLE") or "ray::IDLE" in " ".join(args) \
            or args[1:2] != [] and args[1].endswith("ray_worker_main.py")
    except Exception:  # noqa: BLE001 - it exited meanwhile
        return True


def _cluster_roots() -> tuple[str, ...]:
    """Where the programs of a Ray cluster live: Ray's package (raylet, gcs_server, its workers) and
    trainkit's cluster folder (the embedded cluster's worker, agent stub and watchdog)."""
    roots = [os.path.dirname(os.path.abspath(net.__file__)) + os.sep]
    spec = importlib.util.find_spec("ray")  # not imported here
    if spec is not None and spec.submodule_search_locations:
        roots.extend(os.path.abspath(path) + os.sep for path in spec.submodule_search_locations)
    return tuple(roots)


def _of_a_cluster(process: Any, before: set[int], roots: tuple[str, ...]) -> bool:
    """A process the Ray cluster runs: below a process that ran before the test (the module's
    raylet starts the workers of the test's actors), or a Ray or trainkit cluster program by its
    command line (a cluster the test started and stopped)."""
    try:
        if any(parent.pid in before for parent in process.parents()):
            return True
        cmdline = " ".join(process.cmdline())
    except Exception:  # noqa: BLE001 - it exited meanwhile
        return False
    return cmdline.startswith("ray::") or any(root in cmdline for root in roots)


@pytest.fixture
def no_leaked_processes() -> Iterator[None]:
    """Fails a test that leaves new descendant processes of the test process running (Ray's idle
    worker pool excepted), e.g. a framework's tracker or a worker actor that was never killed.

    What the test started itself has ``_GRACE_S`` (10 s) to end. The Ray cluster's processes (the
    workers of killed actors, a stopped cluster's programs) are waited on until they exit, up to
    ``_STOPPING_S`` (120 s): on a loaded machine a worker takes its time to end, and only one still
    running then is a leak."""
    import psutil

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    roots = _cluster_roots()

    def alive(process: Any) -> bool:
        try:
            return process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:  # it exited while we looked
            return False

    def new_processes(of_the_cluster: bool) -> list:
        return [p for p in me.children(recursive=True) if p.pid not in before and alive(p) and not _ray_owned(p)
                and _of_a_cluster(p, before, roots) == of_the_cluster]

    yield
    started = time.monotonic()
    # trainkit's spare workers for the next fit are no leak, but new processes whenever Ray's idle pool had
    # none to give them (a busy machine): stopped first, then waited for like the rest
    spare.take(None)
    left = _wait_until_gone(lambda: new_processes(of_the_cluster=False))
    deadline = started + _STOPPING_S
    stopping = new_processes(of_the_cluster=True)
    while stopping and (remaining := deadline - time.monotonic()) > 0:
        psutil.wait_procs(stopping, timeout=min(1.0, remaining))
        stopping = new_processes(of_the_cluster=True)  # listed again: a worker back in Ray's idle pool is no leak
    left += stopping
    if left:
        names = []
        for p in left:
            try:
                names.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
            except Exception:  # noqa: BLE001
                pass
        if names:
            pytest.fail("the test leaked processes:\n  " + "\n  ".join(names))
