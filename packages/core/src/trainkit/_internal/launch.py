"""``trainkit launch``: an unchanged torchrun-style script on N trainkit workers.

Each rank runs the script as a fresh ``python script.py args...`` subprocess of its worker, with the
environment torchrun gives (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_USE_AGENT_STORE: the store is
rank 0's worker's, as torchrun's agent's). A subprocess, not ``runpy`` in the worker:
the script gets a main thread (signal handlers), its own ``__main__`` (multiprocessing's spawn
re-imports it), ``sys.exit``/``os._exit`` codes and fd-level output (C extensions, child processes)
exactly as under torchrun, and module-level state never leaks from one attempt into the next.

``trainkit.report()`` in the script reaches the worker's session through a Unix socket the worker
opens for its subprocess (``TRAINKIT_LAUNCH_ADDRESS``): the script's process uploads its checkpoint
files itself and hands the report to its worker, which forwards it to the driver as its own.
"""

from __future__ import annotations

import atexit
import codecs
import importlib.util
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from multiprocessing.connection import Client, Listener
from typing import Any

from trainkit._internal import interface
from trainkit.backend import Backend, BackendConfig

ADDRESS_ENV = "TRAINKIT_LAUNCH_ADDRESS"


class ScriptExitError(RuntimeError):
    """A rank's script exited with a non-zero status (``returncode``; -N: killed by signal N)."""

    def __init__(self, script: str, returncode: int):
        super().__init__(f"{script} exited with status {returncode}")
        self.script, self.returncode = script, returncode

    def __reduce__(self) -> tuple:
        return ScriptExitError, (self.script, self.returncode)


@dataclass
class LaunchConfig(BackendConfig):
    """The rendezvous address torchrun would give: rank 0's host and a free port there."""

    @property
    def backend_cls(self) -> type[Backend]:
        return _LaunchBackend


class _LaunchBackend(Backend):
    def on_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        worker_group.set_env([r.env() for r in worker_group.rendezvous()])


def torchrun_env(context: Any) -> dict[str, str]:
    """What torchrun sets for a rank (MASTER_ADDR/PORT and GROUP_WORLD_SIZE come from the backend)."""
    return {
        "RANK": str(context.world_rank), "WORLD_SIZE": str(context.world_size),
        "LOCAL_RANK": str(context.local_rank), "LOCAL_WORLD_SIZE": str(context.local_world_size),
        "GROUP_RANK": str(context.node_rank), "NODE_RANK": str(context.node_rank),
        "ROLE_RANK": str(context.world_rank),
        "ROLE_WORLD_SIZE": str(context.world_size), "ROLE_NAME": "default",
        "TORCHELASTIC_RESTART_COUNT": str(context.attempt), "TORCHELASTIC_RUN_ID": context.experiment_name,
        "PYTHONUNBUFFERED": "1",
    }


def run_script(config: dict[str, Any]) -> None:
    """The training function of ``trainkit launch``: run ``config["script"]`` with ``config["args"]``
    in a subprocess; raise ScriptExitError when it exits non-zero."""
    from trainkit._internal.session import get_session

    session = get_session("launch")
    context = session.context
    env = {**os.environ, **torchrun_env(context)}
    cwd = config["cwd"] if os.path.isdir(config["cwd"]) else os.path.dirname(config["script"])
    agent_store = importlib.util.find_spec("torch") is not None
    if agent_store:
        env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    with _Bridge(session) as bridge:
        env[ADDRESS_ENV] = bridge.address
        proc = subprocess.Popen([sys.executable, config["script"], *config["args"]], cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        pumps = [threading.Thread(target=_pump, args=(pipe, stream), daemon=True)
                 for pipe, stream in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
        for pump in pumps:
            pump.start()
        if agent_store and context.world_rank == 0:
            _host_store(env, proc)
        returncode = proc.wait()
        for pump in pumps:  # a process the script left running may hold its pipes open
            pump.join(timeout=5)
    if returncode != 0:
        raise ScriptExitError(os.path.basename(config["script"]), returncode)


_agent_store: Any = None  # rank 0's worker keeps its attempt's store until the worker ends


def _host_store(env: dict[str, str], proc: subprocess.Popen) -> None:
    """Host the rendezvous store as torchrun's agent does (``TORCHELASTIC_USE_AGENT_STORE``): in rank 0's
    worker, up until the worker ends, not in the script's rank 0, whose exit took it from under ranks
    still using it. The scripts' clients retry until it listens; one store per attempt (each
    rendezvous has its own port). The script is killed when the store cannot start."""
    global _agent_store
    from datetime import timedelta

    from torch.distributed import TCPStore

    try:
        _agent_store = TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=True,
                                wait_for_workers=False, multi_tenant=True, timeout=timedelta(minutes=30))
    except Exception:
        proc.kill()
        raise


def _die_with_parent() -> None:
    """The script's process ends with its worker (a failed attempt's workers are killed)."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _pump(pipe: Any, stream: Any) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while chunk := os.read(pipe.fileno(), 65536):
        stream.write(decoder.decode(chunk))
    stream.write(decoder.decode(b"", final=True))
    stream.flush()
    pipe.close()


class _Bridge:
    """The worker's end of the script's ``trainkit.report()``: sends the script's process its session
    (context, storage, resume checkpoint, next report index) and forwards the reports it sends back.
    The socket lies in a directory only this user can enter (``mkdtemp``)."""

    def __init__(self, session: Any):
        self._session = session
        self._dir = tempfile.mkdtemp(prefix="trainkit-launch-")
        self.address = os.path.join(self._dir, "socket")
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
        try:
            os.rmdir(self._dir)
        except OSError:
            pass


def script_session() -> Any:
    """In a launched script's process: a session whose reports go to the worker (None elsewhere)."""
    if not os.environ.get(ADDRESS_ENV):
        return None
    from trainkit._internal.session import Session

    conn = Client(os.environ[ADDRESS_ENV], family="AF_UNIX")
    context, storage, next_index, checkpoint = conn.recv()
    lock = threading.Lock()

    def send(report: Any) -> None:
        with lock:
            conn.send(report)

    session = Session(context, storage, send, next_index=next_index, checkpoint=checkpoint)
    atexit.register(session.finish)  # background uploads and hashing end before the process does
    return session


# -- the command ---------------------------------------------------------------------------------
def add_arguments(parser: Any) -> None:
    import argparse

    parser.add_argument("--nproc", type=int, default=1, help="how many workers (ranks) run the script (default: 1)")
    parser.add_argument("--max-failures", type=int, default=0,
                        help="restart all ranks this many times after a rank fails (-1: always; default: 0)")
    parser.add_argument("--name", help="the run's name (default: <script>_<date>)")
    parser.add_argument("--storage-path", help="where the run directory goes (default: $TRAINKIT_STORAGE_PATH, "
                        "else ~/trainkit_results)")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs each worker reserves (default: 1)")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs each worker reserves (default: 0)")
    parser.add_argument("script", help="the Python script, run as `python SCRIPT ARGS...` on every rank")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's arguments")


def main(args: Any) -> int:
    """Run the script; the exit status is its outcome: 0, the failing rank's status, 1 when trainkit
    itself failed (e.g. a worker died), 2 for bad arguments."""
    import time

    import trainkit

    script = os.path.abspath(args.script)
    problems = [f"--nproc {args.nproc}: expected 1 or more" if args.nproc < 1 else "",
                f"--max-failures {args.max_failures}: expected -1 or more" if args.max_failures < -1 else "",
                f"script {args.script!r} is not a file" if not os.path.isfile(script) else ""]
    if problem := next((p for p in problems if p), None):
        print(f"trainkit launch: {problem}", file=sys.stderr)
        return 2
    resources = {"CPU": args.cpus_per_worker, **({"GPU": args.gpus_per_worker} if args.gpus_per_worker else {})}
    name = args.name or f"{os.path.splitext(os.path.basename(script))[0]}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    with interface.command_line(interface.LAUNCH_FLAGS):  # messages name --name, not RunConfig(name=...)
        try:
            trainer = trainkit.DataParallelTrainer(
                run_script, train_loop_config={"script": script, "args": list(args.script_args), "cwd": os.getcwd()},
                backend_config=LaunchConfig(),
                scaling_config=trainkit.ScalingConfig(num_workers=args.nproc, resources_per_worker=resources),
                run_config=trainkit.RunConfig(name=name, storage_path=args.storage_path,
                                              failure_config=trainkit.FailureConfig(max_failures=args.max_failures)))
        except ValueError as exc:
            print(f"trainkit launch: {exc}", file=sys.stderr)
            return 2
        try:
            trainer.fit()
        except trainkit.RunLockedError as exc:
            print(f"trainkit launch: {exc}", file=sys.stderr)
            return 1
        except trainkit.TrainingFailedError as exc:
            if isinstance(exc.__cause__, ScriptExitError):
                code = exc.__cause__.returncode
                return code if code > 0 else 128 - code  # killed by signal N: 128 + N, as a shell says
            return 1
    return 0
