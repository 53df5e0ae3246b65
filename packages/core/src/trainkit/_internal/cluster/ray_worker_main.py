"""The Python worker of trainkit's own clusters: Ray's ``default_worker.py``, after two changes.

Where the cluster has a fork server (``WORKERS_ENV`` names its socket: the embedded cluster's, with
the first trainer's framework imported, ``ray_runtime.start_fork_server``, or the warm cluster's),
this process is a stand-in that asks the server for a forked child to be the worker, waits for the
child and exits as it does: the worker starts with the framework imported, in a process of its own.
Ray registers the child's pid and ends it as any worker (the stand-in follows). The stand-in ignores
SIGTERM, SIGINT and SIGHUP (a signal to every process of a machine reaches the worker itself, once);
killed, the server kills the child. The server dying does not end the worker (it lives as long as
Ray keeps it). Refused (another interpreter, an environment the framework would load otherwise,
site-packages changed: ``forkserver._Server._refusal``) or with no server listening, the stand-in is the
worker itself, as without a server.

Then Ray's worker runs, with pydantic imported only when used (``ray_patches.lazy_pydantic``). Run as
a script (``ray_params.worker_path``), this file imports nothing of trainkit: it loads the modules it
needs by their paths.
"""

import importlib.util
import os
import signal
import runpy
import sys

WORKERS_ENV = "TRAINKIT_WORKER_FORKSERVER"  # the socket of the fork server the cluster's workers start from
_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # what a stand-in ignores: its worker gets them


def _sibling(name: str):
    """This folder's module ``name``, loaded without importing trainkit (the one already loaded, in a
    forked child or a process that imported trainkit)."""
    if (loaded := sys.modules.get(f"trainkit._internal.cluster.{name}")) is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(f"_trainkit_{name}", os.path.join(os.path.dirname(__file__), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_forked(address: str) -> int | None:
    """Have the server at ``address`` fork this worker; its exit status (-N: signal N), or None
    when it was not forked (the reason goes to the worker's log)."""
    forked = sys.modules.get("trainkit._internal.cluster.fork_child")  # (loaded in the server's children)
    if forked is not None and forked.loaded_env is not None:
        return None  # this is the forked child
    # Ray sets OMP_NUM_THREADS when it starts an actor's task (its CPUs, else 1), after the
    # framework loaded here: a forked worker's framework follows it then (``BackendConfig.after_fork``)
    runtime_keys = set() if "OMP_NUM_THREADS" in os.environ else {"OMP_NUM_THREADS"}
    stopping = {signum: signal.signal(signum, signal.SIG_IGN) for signum in _STOPS}  # from before the fork
    child = _sibling("fork_client").start(address, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]], "script",
                             os.getcwd(), dict(os.environ), runtime_keys, inherit_stdio=True, outlive_server=True)
    if isinstance(child, str):
        for signum, handler in stopping.items():
            signal.signal(signum, handler)  # this process is the worker
        print(f"trainkit: this worker was not forked: {child}", file=sys.stderr, flush=True)
        return None
    return child.wait()


def exit_as(code: int) -> None:
    """End this process as its worker ended: ``code`` a ``Popen`` return code (-N: killed by signal N)."""
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # (their disposition cannot be set)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


if __name__ == "__main__":
    if (address := os.environ.pop(WORKERS_ENV, None)) and (code := run_forked(address)) is not None:
        exit_as(code)
    _sibling("ray_patches").lazy_pydantic()
    sys.argv[0] = _sibling("ray_private").default_worker_path()
    runpy.run_path(sys.argv[0], run_name="__main__")
