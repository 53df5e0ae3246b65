"""The body of a worker actor: one per rank, running the training function in a thread.

The driver long-polls ``poll()``: it returns as soon as there is something to say (a report,
output, the end) or after ``timeout`` seconds as a heartbeat. Nothing on the report path sleeps.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable

from trainkit._internal.class_ids import share_class_ids
from trainkit._internal.cluster import fork_child, forkserver
from trainkit._internal.storage.run_storage import RunStorage
from trainkit._internal.worker import preemption
from trainkit._internal.worker.context_types import TrainContext
from trainkit._internal.worker.events import EventQueue, Failed, Finished, Preempted
from trainkit._internal.worker.rank_output import RankOutput
from trainkit._internal.worker.session import SALVAGE_S, Session, set_session, set_worker_context
from trainkit.backend import BackendConfig
from trainkit.checkpoint import Checkpoint

POLL_EVENTS = 1000


def call_train_fn(fn: Callable, config: dict | None) -> Any:
    """Call ``fn(config)`` when it takes an argument, else ``fn()`` (as Ray Train does)."""
    takes_arg = len(inspect.signature(fn).parameters) >= 1
    if config is not None and not takes_arg:
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} takes no argument but train_loop_config was given")
    return fn(config if config is not None else {}) if takes_arg else fn()


def _check_return_value(fn: Callable, value: Any) -> None:
    """The return value travels to the driver pickled: say so plainly when it cannot."""
    from ray import cloudpickle

    try:
        cloudpickle.dumps(value)
    except Exception as exc:  # noqa: BLE001 - any pickling failure gets the same explanation
        raise TypeError(f"the training function {getattr(fn, '__qualname__', fn)!r} returned a "
                        f"{type(value).__name__} that cannot be sent to the driver: {exc}. Return plain data "
                        "(numbers, strings, dicts, arrays) or save the object in a checkpoint") from None


def failure_event(rank: int, exc: BaseException) -> Failed:
    try:
        pickle.loads(pickle.dumps(exc))  # some exceptions pickle but cannot be rebuilt
        original = exc
    except Exception:  # noqa: BLE001 - an unpicklable exception still reports type and traceback
        original = None
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return Failed(rank, type(exc).__qualname__, str(exc), tb, original)




DRIVER_CWD = "TRAINKIT_DRIVER_CWD"  # set by a driver on an attached cluster: its workers run where it runs, as on the embedded one
CLAIMER_WATCH_S = 0.5  # how often a claimed spare checks that the driver that claimed it still runs


def actor_options(resources: dict[str, float], runtime_env: dict[str, Any] | None = None) -> dict[str, Any]:
    """Ray's options for a worker actor holding ``resources`` (a spare waits holding none: ``{}``)."""
    custom = {k: v for k, v in resources.items() if k not in ("CPU", "GPU", "memory")}
    options: dict[str, Any] = {"num_cpus": resources.get("CPU", 0), "num_gpus": resources.get("GPU", 0),
                               "max_concurrency": 4, "max_restarts": 0}
    if "memory" in resources:
        options["memory"] = resources["memory"]
    if custom:
        options["resources"] = custom
    if runtime_env:
        options["runtime_env"] = runtime_env
    return options


def start_actor(prewarm_modules: tuple[str, ...], **options: Any) -> Any:
    """A worker actor, not waited for, importing ``prewarm_modules`` in the background."""
    global _worker_class
    import ray

    if _worker_class is None:  # one ActorClass: Ray pickles and exports a new one at each creation (~50 ms)
        _worker_class = ray.remote(Worker)
    return _worker_class.options(**options).remote(prewarm_modules)


_worker_class: Any = None


class Worker:
    """One rank. Ray runs it as a threaded actor so ``poll`` answers while training runs."""

    def __init__(self, prewarm_modules: tuple[str, ...] = ()) -> None:
        share_class_ids()  # a handed-off fit's classes come back as the user's (class_ids.py)
        self._import_s: float | None = None  # how long the prewarm imports took, once done
        self._site_dirs = forkserver.site_dirs()  # before the prewarm imports: a spare is stale once they change
        self._prewarm: threading.Thread | None = None
        if prewarm_modules:  # overlap the framework's import with the group's setup round trips
            self._prewarm = threading.Thread(target=self._import_all, args=(prewarm_modules,), daemon=True)
            self._prewarm.start()
        self._events = EventQueue()
        self._claim_lock = threading.Lock()
        self._claimer: tuple[int, str] | None = None  # the driver that took this keeper's spare: (pid, start time)
        self._session: Session | None = None
        self._context: TrainContext | None = None
        self._driver_node: str | None = None  # Ray's id of the driver's node
        self._train_thread: threading.Thread | None = None
        self._preemption: Any = None  # the PreemptionInfo the driver sent, for the session
        # Ray runs an actor's __init__ in the process's main thread, the only one that may set a
        # handler. SIGTERM is a preemption notice: the driver hears of it and stops this process
        # at the deadline (Ray's own handler would exit at once).
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        rank = self._context.world_rank if self._context else -1
        self._events.put(Preempted(rank, preemption.sigterm_deadline_ms()))

    def mark_preempted(self, info: Any) -> None:
        """The driver's preemption notice (a PreemptionInfo), for ``get_preemption_info()``."""
        self._preemption = info
        if self._session is not None:
            self._session.preemption_info = info

    def claim(self, claimer: tuple[int, str], modules: tuple[str, ...], sys_path: list[str]) -> bool:
        """A driver takes this spare worker of the warm cluster's keeper (trainkit-warm's
        ``spare_workers``): True for the
        first claim only. The process then imports ``modules`` (the group's framework) if its own
        prewarm did not, finds the driver's code where Ray would put it (``sys_path``), and ends
        itself when the claiming process (pid, start time) ends without stopping it: its keeper
        owns it, so Ray would not. A spare started before a ``pip install`` (site-packages changed
        since) imported what a fresh process would no longer find: it ends instead (the claimer sees
        it die and starts a worker; the keeper starts new spares)."""
        import ray

        with self._claim_lock:
            if self._claimer is not None:
                return False
            if forkserver.site_dirs() != self._site_dirs:
                ray.actor.exit_actor()
            self._claimer = claimer
        sys.path[:0] = [p for p in sys_path if p not in sys.path]
        if modules and (self._prewarm is None or not self._prewarm.is_alive()):
            self._prewarm = threading.Thread(target=self._import_all, args=(modules,), daemon=True)
            self._prewarm.start()
        threading.Thread(target=self._end_with_claimer, name="trainkit-claimer-watch", daemon=True).start()
        return True

    def claimed(self) -> bool:
        return self._claimer is not None

    def _end_with_claimer(self) -> None:
        from trainkit._internal.cluster.watchdog import identities

        pid, started = self._claimer
        while identities([pid]).get(pid) == started:
            time.sleep(CLAIMER_WATCH_S)
        os._exit(1)

    def _import_all(self, modules: tuple[str, ...]) -> None:
        start = time.monotonic()
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the real import later reports any problem
                return
        self._import_s = time.monotonic() - start

    def node_info(self) -> dict[str, Any]:
        import ray

        runtime = ray.get_runtime_context()
        return {
            "node_id": runtime.get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "accelerator_ids": runtime.get_accelerator_ids(),
            "labels": getattr(runtime, "get_node_labels", dict)(),
        }

    def setup(self, context: TrainContext, env: dict[str, str], driver_node: str) -> None:
        os.environ.update(env)
        if (cwd := env.get(DRIVER_CWD)) and os.path.isdir(cwd):  # an attached cluster's workers start elsewhere ("/")
            os.chdir(cwd)
        self._context = context
        self._driver_node = driver_node
        set_worker_context(context)
        sys.stdout = RankOutput(sys.__stdout__, context.world_rank, self._events.put)
        sys.stderr = RankOutput(sys.__stderr__, context.world_rank, self._events.put)

    def execute(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def start(self, pickled_fn: bytes, config: dict | None, backend_config: BackendConfig, storage: RunStorage,
              next_index: int, checkpoint: Checkpoint | None, datasets: dict[str, Any] | None) -> float | None:
        """Start the training thread; returns how long the framework's prewarm import took (None
        while it still runs). The function comes pickled: the training thread unpickles it once the
        prewarm imports ended (a function that refers to e.g. ``torch.nn``, unpickled while another
        thread imports torch, can meet a half-initialized module)."""
        assert self._context is not None, "setup() must run first"
        rank = self._context.world_rank
        self._session = Session(self._context, storage, self._events.put, next_index=next_index,
                                checkpoint=checkpoint, datasets=datasets)
        self._session.preemption_info = self._preemption
        self._session.driver_node = self._driver_node
        set_session(self._session)

        def run() -> None:
            try:
                from ray import cloudpickle

                if self._prewarm is not None:
                    self._prewarm.join()
                fork_child.after_fork()  # a forked worker: what its framework redoes in a fork (its thread pools)
                fn = cloudpickle.loads(pickled_fn)
                self._session.progress.mark()  # progress counts from the training function's start, not its imports
                with backend_config.train_fn_context():
                    value = call_train_fn(fn, config)
                _check_return_value(fn, value)
                self._session.finish()
                event: Any = Finished(rank, value)
            except BaseException as exc:  # noqa: BLE001 - every error goes to the driver
                # A report that returned before the error still commits: its upload (or, for SYNC
                # on local disk, its hashing) may be running in the background; it reaches the
                # driver before the failure does.
                self._session.salvage(timeout_s=SALVAGE_S)
                event = failure_event(rank, exc)
            sys.stdout.flush()
            sys.stderr.flush()
            self._events.put(event)

        self._train_thread = threading.Thread(target=run, name=f"trainkit-train-rank{rank}", daemon=True)
        self._train_thread.start()
        return self._import_s

    def progress(self, timeout_s: float) -> tuple[float, str] | None:
        """(seconds without progress, the training thread's stack) once that exceeds ``timeout_s``."""
        return self._session and self._session.progress.stalled(self._train_thread, timeout_s)

    def restart_progress(self) -> None:
        """See ``ProgressWatch.restart``."""
        if self._session is not None:
            self._session.progress.mark()

    def acknowledge(self, committed: list[tuple[int, Checkpoint | None, dict, list[int]]]) -> None:
        """The driver committed these reports (see ``Session.on_committed``)."""
        if self._session is not None:
            for ack in committed:
                self._session.on_committed(*ack)

    def poll(self, timeout: float) -> list[Any]:
        """Wait up to ``timeout`` s for events and return those ready, at most ``POLL_EVENTS`` (a
        backlog reaches the driver in bounded batches: its memory stays flat)."""
        return self._events.take(timeout, POLL_EVENTS)

    def drain(self, uploads_s: float) -> tuple[list[Any], bool]:
        """The attempt failed elsewhere: what this rank still holds for the driver, once the uploads
        of reports that already returned were handed over (waiting up to ``uploads_s``), and whether
        some still run. Polls stop waiting, so the driver's poll in flight answers now."""
        uploading = self._session is not None and not self._session.wait_for_uploads(uploads_s)
        return self._events.close(), uploading

    def stop(self) -> None:
        set_session(None)
        set_worker_context(None)

    def __repr__(self) -> str:  # Ray uses it to name the actor in its own logs
        return f"trainkit rank {self._context.world_rank}" if self._context else "trainkit worker"
