"""``trainkit launch``: an unchanged torchrun-style script on N trainkit workers.

Each rank runs the script as a fresh ``python script.py args...`` subprocess of its worker (``python -m
module args...`` with ``-m``, the executable itself with ``--no-python``, as torchrun), with the
environment torchrun gives (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_USE_AGENT_STORE: the store is
rank 0's worker's, as torchrun's agent's). A subprocess, not ``runpy`` in the worker:
the script gets a main thread (signal handlers), its own ``__main__`` (multiprocessing's spawn
re-imports it), ``sys.exit``/``os._exit`` codes and fd-level output (C extensions, child processes)
exactly as under torchrun, and module-level state never leaks from one attempt into the next. On the
warm cluster (``trainkit up``) its fork server starts that process with the framework imported
already, where the result is the same (``cluster/forkserver.py``); elsewhere it is a new interpreter.

Signals as under torchrun: the script starts in its own session with an empty signal mask and default
dispositions (Ray's processes block SIGINT). The launcher's SIGTERM, SIGINT, SIGHUP and SIGQUIT
(``--signals-to-handle``) go to every rank's process group as that signal, then SIGKILL after
``--shutdown-timeout``; the run then ends as Ctrl-C ends a fit (state ``interrupted``, no restart) and
the launcher exits 128 + the signal. When an attempt ends early (a rank failed), the other ranks get
SIGTERM and, still running after the same grace, SIGKILL (``_LaunchBackend.on_abort``).

``trainkit.report()`` in the script reaches the worker's session through a Unix socket the worker
opens for its subprocess (``TRAINKIT_LAUNCH_ADDRESS``): the script's process uploads its checkpoint
files itself and hands the report to its worker, which forwards it to the driver as its own.
"""

from __future__ import annotations

import codecs
import importlib.util
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Client, Listener
from typing import Any

from trainkit._internal.cluster import fork_client, processes
from trainkit._internal.driver.signals import Interrupted
from trainkit._internal.driver.signals import handler as stop_signal
from trainkit._internal.worker.debugger import RAYS_HOOKS
from trainkit._internal.worker.session import LAUNCH_ADDRESS_ENV
from trainkit.backend import Backend, BackendConfig
from trainkit.errors import ScriptExitError

DEFAULT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"  # torchrun's --signals-to-handle
DEFAULT_SHUTDOWN_TIMEOUT_S = 30  # torchrun's --shutdown-timeout (TORCH_ELASTIC_SHUTDOWN_TIMEOUT)


@dataclass
class LaunchConfig(BackendConfig):
    """The rendezvous address torchrun would give (rank 0's host and a free port there), and how the
    launcher's signals reach the ranks: ``signals`` go to every rank as they are, ``shutdown_timeout_s``
    later the ranks still running are SIGKILLed."""

    signals: tuple[str, ...] = tuple(DEFAULT_SIGNALS.split(","))
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S
    #: the scripts' framework (the launcher gives torch's where trainkit-torch is installed): the
    #: embedded cluster's fork server imports it once and forks the ranks' workers and scripts
    framework: type[BackendConfig] | None = None

    @property
    def backend_cls(self) -> type[Backend]:
        return _LaunchBackend


class _LaunchBackend(Backend):
    def on_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        worker_group.set_env([r.env() for r in worker_group.rendezvous(listen=True)])  # rank 0's store holds the port
        forwarder.watch(worker_group, backend_config)

    def on_shutdown(self, worker_group: Any, backend_config: BackendConfig) -> None:
        forwarder.release()

    def on_abort(self, worker_group: Any, backend_config: BackendConfig) -> None:
        """The attempt ends before every script did: SIGTERM to each still running (unless the
        launcher's own signal reached it already), SIGKILL to those still running after the grace."""
        import ray

        try:
            grace_s = backend_config.shutdown_timeout_s
            stops = worker_group.execute_async(_stop_script, grace_s)
            ray.wait(stops, num_returns=len(stops), timeout=grace_s + 10)  # a dead rank's answers at once
        finally:
            forwarder.release()


class _Forwarder:
    """In the launcher: while an attempt's ranks run, each of ``LaunchConfig.signals`` goes to every
    rank as it is (a thread sends it: nothing blocks in the handler). Once the attempt ended,
    ``release`` ends the run as Ctrl-C does. A signal while no rank runs is Ctrl-C at once."""

    def __init__(self) -> None:
        self.received: list[int] = []  # every signal the launcher got, in order
        self._group: Any = None
        self._config: Any = None
        self._signals: queue.SimpleQueue = queue.SimpleQueue()  # put() is safe in a signal handler
        self._thread: threading.Thread | None = None

    def watch(self, group: Any, config: Any) -> None:
        self._group, self._config = group, config
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers are the main thread's (``trainkit launch`` runs fit() there)
        for name in config.signals:  # after ray.init, whose own SIGTERM handler exits at once
            signal.signal(getattr(signal, name), self._on_signal)
        if self._thread is None:
            self._thread = threading.Thread(target=self._send, name="trainkit-launch-signals", daemon=True)
            self._thread.start()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.received.append(signum)
        if self._group is not None:
            self._signals.put(signum)
        elif len(self.received) == 1:  # later ones come while the run ends already
            stop_signal(signum, frame)  # as fit()'s own handler: after a commit in progress, never inside it

    def _send(self) -> None:
        while True:
            signum = self._signals.get()
            group, config = self._group, self._config
            if group is None:
                continue
            print(f"trainkit launch: {signal.Signals(signum).name}: sent to all {len(group)} ranks; SIGKILL to those "
                  f"still running {config.shutdown_timeout_s:g} s later (--shutdown-timeout)",
                  file=sys.stderr, flush=True)
            try:
                group.execute_async(_forward_signal, signum, config.shutdown_timeout_s)
            except Exception as exc:  # noqa: BLE001 - the ranks' end ends the run regardless
                print(f"trainkit launch: could not send {signal.Signals(signum).name} to the ranks: {exc}",
                      file=sys.stderr, flush=True)

    def release(self) -> None:
        """The attempt's ranks ended: a signal received meanwhile ends the run (Ctrl-C's path)."""
        self._group = None
        if self.received:
            raise Interrupted(self.received[0])


forwarder = _Forwarder()


def torchrun_env(context: Any, config: dict[str, Any]) -> dict[str, str]:
    """What torchrun sets for a rank (MASTER_ADDR/PORT and GROUP_WORLD_SIZE come from the backend)."""
    return {
        "RANK": str(context.world_rank), "WORLD_SIZE": str(context.world_size),
        "LOCAL_RANK": str(context.local_rank), "LOCAL_WORLD_SIZE": str(context.local_world_size),
        "GROUP_RANK": str(context.node_rank), "NODE_RANK": str(context.node_rank),
        "ROLE_RANK": str(context.world_rank),
        "ROLE_WORLD_SIZE": str(context.world_size),
        "ROLE_NAME": config.get("role", "default"),
        "TORCHELASTIC_RESTART_COUNT": str(context.attempt), "TORCHELASTIC_RUN_ID": context.experiment_name,
        "TORCHELASTIC_MAX_RESTARTS": str(config["max_restarts"]),
        "TORCHELASTIC_SIGNALS_TO_HANDLE": ",".join(config["signals"]),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        "PYTHONUNBUFFERED": "1",
    }


def _without_ray_debugger(env: dict[str, str]) -> dict[str, str]:
    """``env`` without Ray's debugger settings (``PYTHONBREAKPOINT=ray.util.rpdb.set_trace``, ``RAY_DEBUG*``).
    The worker's ``PYTHONBREAKPOINT`` is trainkit's hook or the user's own (``debug_relay``): it stays."""
    return {k: v for k, v in env.items()
            if not k.startswith("RAY_DEBUG") and not (k == "PYTHONBREAKPOINT" and v in RAYS_HOOKS)}


def command(config: dict[str, Any]) -> list[str]:
    """How a rank starts the script, as torchrun starts it: ``python SCRIPT``, ``python -m MODULE``
    (``-m``) or ``SCRIPT`` itself (``--no-python``), then its arguments."""
    mode, script = config.get("mode", "script"), config["script"]
    head = {"module": [sys.executable, "-m", script], "exec": [script]}.get(mode, [sys.executable, script])
    return [*head, *config["args"]]


def run_script(config: dict[str, Any]) -> None:
    """The training function of ``trainkit launch``: run ``config["script"]`` with ``config["args"]``
    in a subprocess; raise ScriptExitError when it exits non-zero."""
    from trainkit._internal.worker.session import get_session

    session = get_session("launch")
    context = session.context
    env = {**_without_ray_debugger(dict(os.environ)), **torchrun_env(context, config)}
    env.pop(fork_client.ENV, None)
    if config.get("virtual_local_rank"):
        env["LOCAL_RANK"] = "0"
    if os.path.isdir(config["cwd"]):
        cwd = config["cwd"]
    else:  # the launcher's directory is not on this node
        cwd = os.path.dirname(config["script"]) if config.get("mode", "script") == "script" else None
    agent_store = importlib.util.find_spec("torch") is not None
    if agent_store:
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    files = _log_files(config.get("logs"), context)
    with _Bridge(session) as bridge:
        env[LAUNCH_ADDRESS_ENV] = bridge.address
        env["TORCHELASTIC_ERROR_FILE"] = error_file = os.path.join(bridge.directory, "error.json")
        proc = _script.start(command(config), config.get("mode", "script"), cwd, env,
                             runtime_keys={*torchrun_env(context, config), LAUNCH_ADDRESS_ENV, "TORCHELASTIC_ERROR_FILE",
                                           "TORCHELASTIC_USE_AGENT_STORE"})
        pumps = [threading.Thread(target=_pump, args=(pipe, *files[std]), daemon=True)
                 for std, pipe in ((1, proc.stdout), (2, proc.stderr))]
        for pump in pumps:
            pump.start()
        if agent_store and context.world_rank == 0:
            _host_store(env, proc)
        returncode = proc.wait()
        _script.ended.set()
        for pump in pumps:  # a process the script left running may hold its pipes open
            pump.join(timeout=5)
        error = _read_error_file(error_file) if returncode != 0 else None
    if returncode != 0:
        raise ScriptExitError(config.get("label") or os.path.basename(config["script"]), returncode, error)


def _log_files(logs: dict[str, Any] | None, context: Any) -> dict[int, tuple[Any, Any]]:
    """{1: (stream, file) for stdout, 2: for stderr}: the stream the output is shown on (None:
    ``--redirects`` keeps it only in the file), the file it also goes to (None: none), as torchrun's
    ``-r``/``-t`` say per local rank: ``<log dir>/<run>/attempt_<N>/<rank>/std{out,err}.log``."""
    streams = {1: sys.stdout, 2: sys.stderr}
    if not logs:
        return {std: (stream, None) for std, stream in streams.items()}
    (every_r, redirects), (every_t, tee) = logs["redirects"], logs["tee"]
    redirect = redirects.get(context.local_rank, every_r)
    teed = tee.get(context.local_rank, every_t)
    directory = os.path.join(logs["root"], context.experiment_name, f"attempt_{context.attempt}",
                             str(context.world_rank))
    files = {}
    for std, stream in streams.items():
        to_file = bool((redirect | teed) & std)
        if to_file:
            os.makedirs(directory, exist_ok=True)
        files[std] = (None if redirect & std and not teed & std else stream,
                      open(os.path.join(directory, f"{'stdout' if std == 1 else 'stderr'}.log"), "ab")
                      if to_file else None)
    return files


def _read_error_file(path: str) -> dict | None:
    try:
        with open(path) as f:
            error = json.load(f)
        return error if isinstance(error, dict) else None
    except (OSError, ValueError):
        return None


_agent_store: Any = None  # rank 0's worker keeps its attempt's store until the worker ends


def _host_store(env: dict[str, str], proc: Any) -> None:
    """Host the rendezvous store as torchrun's agent does (``TORCHELASTIC_USE_AGENT_STORE``): in rank 0's
    worker, up until the worker ends, not in the script's rank 0, whose exit took it from under ranks
    still using it. The scripts' clients retry until it listens; one store per attempt (each
    rendezvous has its own port). The script is killed when the store cannot start."""
    global _agent_store
    from datetime import timedelta

    from torch.distributed import TCPStore

    from trainkit.backend import take_listening_socket

    try:
        listening = take_listening_socket(int(env["MASTER_PORT"]))  # bound by rendezvous(listen=True)
        _agent_store = TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=True,
                                wait_for_workers=False, multi_tenant=True, timeout=timedelta(minutes=30),
                                master_listen_fd=listening.detach() if listening else None)
    except Exception:
        proc.kill()
        raise


class _Script:
    """This worker's script process (one per worker: each attempt has fresh workers) and how it is
    stopped: a signal to its process group (its own session, as torchrun starts ranks: what the
    script started gets it too), SIGKILL to the group when anything of it outlives the grace."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | fork_client.ForkedScript | None = None
        self._pending: list[int] = []  # signals sent before the script started
        self._deadline: float | None = None  # monotonic; set by the first stop
        self.ended = threading.Event()  # the script's process exited (run_script reaped it)
        self.not_forked: str | None = None  # why the warm cluster's fork server did not start it

    def start(self, args: list[str], mode: str, cwd: str | None, env: dict[str, str],
              runtime_keys: set[str]) -> Any:
        """A ``subprocess.Popen`` of ``args``, or on the warm cluster the same script forked by its
        fork server (``forkserver.py``: the framework imported already) where that server can."""
        with self._lock:
            forked = None
            if address := os.environ.get(fork_client.ENV):
                forked = fork_client.start(address, args, mode, cwd, env, runtime_keys)
                if isinstance(forked, str):
                    self.not_forked, forked = forked, None
            self._proc = forked or subprocess.Popen(
                args, start_new_session=True, preexec_fn=_as_a_fresh_process, cwd=cwd, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for signum in self._pending:
                self._kill(signum)
            return self._proc

    def stop(self, signum: int, grace_s: float, *, again: bool) -> None:
        """Send ``signum`` (a stop already under way: only when ``again``), then wait until the
        process group is gone or the first stop's grace ran out, and SIGKILL what is left."""
        with self._lock:
            first = self._deadline is None
            if first:
                self._deadline = time.monotonic() + grace_s
            if first or again:
                self._pending.append(signum)
                if self._proc is not None:
                    self._kill(signum)
            if self._proc is None:
                return  # never started: sent at its start, when it comes
            deadline = self._deadline
        self.ended.wait(max(0.0, deadline - time.monotonic()))
        while self._group_alive() and time.monotonic() < deadline:
            time.sleep(0.05)  # what the script started, outliving it
        self._kill(signal.SIGKILL)

    def _group_alive(self) -> bool:
        try:
            os.killpg(self._proc.pid, 0)
            return True
        except ProcessLookupError:
            return False

    def _kill(self, signum: int) -> None:
        try:
            os.killpg(self._proc.pid, signum)
        except ProcessLookupError:  # the group is gone
            pass


_script = _Script()


def _forward_signal(signum: int, grace_s: float) -> None:
    """On a worker: the launcher got ``signum``."""
    _script.stop(signum, grace_s, again=True)


def _stop_script(grace_s: float) -> None:
    """On a worker: the attempt ends before this rank's script did."""
    _script.stop(signal.SIGTERM, grace_s, again=False)


def _as_a_fresh_process() -> None:
    """In the script's process before exec: the signal state of a process a shell starts (Ray's
    processes block SIGINT, which every child would inherit: KeyboardInterrupt never came), and
    death with the worker (a killed attempt's workers take their scripts along)."""
    processes.default_signals()
    processes.die_with_parent()


def _pump(pipe: Any, stream: Any, file: Any = None) -> None:
    """The script's output to ``stream`` (None: not shown) and ``file`` (None: none) as it comes."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        while chunk := os.read(pipe.fileno(), 65536):
            if file is not None:
                file.write(chunk)
                file.flush()
            if stream is not None:
                stream.write(decoder.decode(chunk))
        if stream is not None:
            stream.write(decoder.decode(b"", final=True))
            stream.flush()
    finally:
        pipe.close()
        if file is not None:
            file.close()


class _Bridge:
    """The worker's end of the script's ``trainkit.report()``: sends the script's process its session
    (context, storage, resume checkpoint, next report index) and forwards the reports it sends back.
    The socket lies in a directory only this user can enter (``mkdtemp``)."""

    def __init__(self, session: Any):
        self._session = session
        self.directory = tempfile.mkdtemp(prefix="trainkit-launch-")  # the socket, the error file
        self.address = os.path.join(self.directory, "socket")
        self._listener = Listener(self.address, family="AF_UNIX")
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "_Bridge":
        self._thread.start()
        return self

    def _serve(self) -> None:
        s = self._session
        try:
            with self._listener.accept() as conn:
                conn.send((s.context, s.storage, s.next_index, s.checkpoint))
                while True:
                    s._hand_over(conn.recv())
        except (EOFError, OSError):  # the script ended (or never called trainkit)
            return

    def __exit__(self, *exc: Any) -> None:
        if self._thread.is_alive():
            try:  # unblock accept() when the script never connected
                Client(self.address, family="AF_UNIX").close()
            except OSError:
                pass
        self._thread.join(timeout=10)
        self._listener.close()
        shutil.rmtree(self.directory, ignore_errors=True)
