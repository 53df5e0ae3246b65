"""The per-process training session behind ``report()``, ``get_context()`` and ``get_checkpoint()``.

A session lives in every worker (and in the driver in local mode). ``report()`` never waits for
the driver: it validates the metrics, uploads this rank's checkpoint files if any (in the calling
thread, or a background thread in ASYNC mode), records a checkpoint report durably
(``report_records``: it survives this process being killed) and hands an event to ``sink``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import threading
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Client
from typing import Any, Callable

from trainkit._internal.driver.progress import Progress
from trainkit._internal.metrics import validate_metrics
from trainkit._internal.naming import validate_name
from trainkit._internal.storage import report_records
from trainkit._internal.storage import checkpoint_files
from trainkit._internal.storage import run_storage as storage_mod
from trainkit._internal.storage.stores import store_of
from trainkit._internal.worker.context_types import CheckpointUploadMode, TrainContext
from trainkit._internal.worker.events import Report
from trainkit.checkpoint import Checkpoint, ReportedCheckpoint, ReportedCheckpointStatus

LAUNCH_ADDRESS_ENV = "TRAINKIT_LAUNCH_ADDRESS"  # set by trainkit launch in each rank's script process
SALVAGE_S = 30.0  # how long a failed training function's in-flight uploads may take to commit


def _check_validation(validation: Any, checkpoint: Checkpoint | None) -> Any:
    """None, or what to validate the checkpoint with: True or a ValidationTaskConfig."""
    from trainkit.validation import ValidationTaskConfig

    if validation is None or validation is False:
        return None
    if validation is not True and not isinstance(validation, ValidationTaskConfig):
        raise TypeError(f"validation={validation!r} is invalid: expected True, False or a trainkit.ValidationTaskConfig")
    if checkpoint is None:
        raise ValueError("report(validation=...) validates the reported checkpoint: pass checkpoint= too")
    return validation


class Session:
    def __init__(
        self,
        context: TrainContext,
        storage: storage_mod.RunStorage,
        sink: Callable[[Any], None],
        *,
        next_index: int,
        checkpoint: Checkpoint | None,
        datasets: dict[str, Any] | None = None,
    ):
        self.context = context
        self.storage = storage
        self._sink = sink
        self._sink_lock = threading.Lock()  # one hand-over at a time; abandon() waits one out
        self.next_index = next_index
        self.checkpoint = checkpoint
        self.datasets = datasets or {}
        self.rendezvous: Any = None  # trainkit.collective's actor handle, made by the first call
        self.driver_node: str | None = None  # where that actor lives: see collective.rendezvous
        self.collective_calls = 0
        self.preemption_info: Any = None  # this rank's notice (a PreemptionInfo): see _internal/worker/preemption.py
        self.preemption_calls = 0
        self.progress = Progress()  # reset by report() and collectives: see _internal/driver/progress.py
        self._uploader: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        self._upload_errors: list[BaseException] = []  # failed background uploads, for report() to raise
        self._committed: dict[int, tuple[Checkpoint, dict]] = {}
        self._reported_checkpoints: list[int] = []
        self._checkpoint_names: set[str] = set()  # taken by this attempt's reports (see RunStorage.upload_path)
        self._removed: set[int] = set()  # committed, then deleted by CheckpointConfig(num_to_keep)
        self._validated_reports: set[int] = set()  # report indices whose checkpoint has a validation
        self._commit_cond = threading.Condition()

    # -- report ----------------------------------------------------------------------------------
    def report(
        self,
        metrics: dict[str, Any],
        checkpoint: Checkpoint | None = None,
        checkpoint_dir_name: str | None = None,
        checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
        delete_local_checkpoint_after_upload: bool | None = None,
        checkpoint_upload_fn: Callable[[Checkpoint, str], Checkpoint] | None = None,
        validation: Any = None,
    ) -> None:
        self.progress.mark()
        self._raise_upload_errors()
        validation = _check_validation(validation, checkpoint)
        metrics = validate_metrics(metrics)
        mode = CheckpointUploadMode(checkpoint_upload_mode)
        if checkpoint is not None and not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"checkpoint must be a trainkit.Checkpoint, got {type(checkpoint).__name__}")
        if checkpoint_dir_name is not None:
            validate_name("checkpoint_dir_name", checkpoint_dir_name)
        index = self.next_index  # taken only once the call is known to be valid
        self.next_index += 1
        rank = self.context.world_rank
        if checkpoint is None:
            self._hand_over(Report(rank, index, metrics))
            return
        name = checkpoint_dir_name or f"checkpoint_{index:06d}"
        tmp_path = self.storage.upload_path(name, self.context.attempt, index, reused=name in self._checkpoint_names)
        self._checkpoint_names.add(name)
        if delete_local_checkpoint_after_upload is None:
            delete_local_checkpoint_after_upload = mode is CheckpointUploadMode.ASYNC
        self._reported_checkpoints.append(index)
        if validation is not None:
            self._validated_reports.add(index)

        where = {"rank": rank, "attempt": self.context.attempt, "index": index}

        def failed(exc: BaseException) -> None:
            # This rank's checkpoint never reaches storage: tell the driver, so the index is closed
            # (metrics only, the other ranks' files dropped) rather than left a hole later reports
            # wait behind. The error still reaches the caller.
            self._reported_checkpoints.remove(index)
            self._hand_over(Report(rank, index, metrics, name, tmp_path, error=f"{type(exc).__name__}: {exc}"))

        def record(files: list[tuple[str, int, str | None]]) -> None:
            """The report's durable record: from now on it survives this process (report_records)."""
            report_records.write(self.storage, self.context.attempt, report_records.Record(
                rank, index, self.context.world_size, metrics, name, tmp_path, files))

        def deliver(files: Callable[[], list[checkpoint_files.FileEntry]], in_background: bool = False,
                    recorded: bool = False) -> None:
            try:
                entries = files()
                if not recorded:
                    record([(e.path, e.size, e.sha256) for e in entries])
            except BaseException as exc:
                if not in_background:
                    failed(exc)
                    raise
                # kept before the driver hears of it: a report() after the driver closed this
                # index (e.g. behind get_all_reported_checkpoints()) raises it, in the training thread
                self._upload_errors.append(exc)
                failed(exc)
                return
            if delete_local_checkpoint_after_upload and mode is not CheckpointUploadMode.NO_UPLOAD:
                shutil.rmtree(checkpoint.path, ignore_errors=True)
            self._hand_over(Report(rank, index, metrics, name, tmp_path, entries, validation))

        def upload() -> list[checkpoint_files.FileEntry]:
            if mode is CheckpointUploadMode.NO_UPLOAD:
                return self._register_in_place(checkpoint, tmp_path)
            if checkpoint_upload_fn is not None:
                uploaded = checkpoint_upload_fn(checkpoint, tmp_path)
                if uploaded.path != tmp_path:
                    raise ValueError(f"checkpoint_upload_fn must upload to the destination it is given "
                                     f"({tmp_path!r}), not {uploaded.path!r}")
                return checkpoint_files.hash_tree(uploaded.filesystem, uploaded.path)
            return checkpoint_files.upload_dir(checkpoint.path, self.storage.fs, tmp_path, **where)

        if mode is not CheckpointUploadMode.NO_UPLOAD and checkpoint_upload_fn is None \
                and store_of(checkpoint.filesystem).local_paths:
            try:
                checkpoint_files.local_files(checkpoint.path)  # refuses links and FIFOs before any upload, in any mode
            except BaseException as exc:
                failed(exc)
                raise
        if mode is CheckpointUploadMode.ASYNC:
            self._background(lambda: deliver(upload, in_background=True))
        elif mode is CheckpointUploadMode.SYNC and checkpoint_upload_fn is None and self.storage.store.local_paths:
            # The files are in storage when report() returns; their sha256s (needed only at the
            # driver's commit) are computed in the background, off the training thread.
            try:
                copied = checkpoint_files.copy_dir_local(checkpoint.path, tmp_path, **where)
                record([(rel, size, None) for rel, size in checkpoint_files.copied_sizes(tmp_path, copied)])
            except BaseException as exc:
                failed(exc)
                raise
            self._background(lambda: deliver(lambda: checkpoint_files.hash_local(tmp_path, copied),
                                             in_background=True, recorded=True))
        else:
            deliver(upload)

    def _background(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in this session's single upload thread (so reports stay in order)."""
        if self._uploader is None:
            self._uploader = ThreadPoolExecutor(1, thread_name_prefix="trainkit-upload")
        self._pending.append(self._uploader.submit(fn))

    def _register_in_place(self, checkpoint: Checkpoint, tmp_path: str) -> list[checkpoint_files.FileEntry]:
        if not checkpoint.path.startswith(self.storage.run_path + "/"):
            raise ValueError(f"NO_UPLOAD needs a checkpoint inside the run directory {self.storage.run_path!r}")
        self.storage.fs.move(checkpoint.path, tmp_path)
        return checkpoint_files.hash_tree(self.storage.fs, tmp_path)

    def _raise_upload_errors(self) -> None:
        if self._upload_errors:
            raise self._upload_errors.pop(0)
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for future in done:
            future.result()  # re-raises an upload error in the training thread

    def _hand_over(self, report: Report) -> None:
        with self._sink_lock:
            self._sink(report)

    def wait_for_uploads(self, timeout_s: float) -> bool:
        """Whether the background uploads of reports that already returned were handed over within ``timeout_s``."""
        return not futures.wait(self._pending, timeout=timeout_s).not_done

    def salvage(self, timeout_s: float) -> None:
        """The training function failed but this process lives: let the uploads of reports that
        already returned finish (up to ``timeout_s``) so they commit, then drop the rest."""
        self.wait_for_uploads(timeout_s)
        self.abandon()

    def abandon(self) -> None:
        """The attempt failed: drop whatever background uploads still produce. Returns once no
        report is being handed over (in local mode the driver commits it in that call)."""
        with self._sink_lock:
            self._sink = lambda _report: None
        for future in self._pending:
            future.cancel()
        self._pending = []
        if self._uploader is not None:
            self._uploader.shutdown(wait=False)

    def finish(self) -> None:
        """Wait for background uploads; raise the first upload error."""
        for future in self._pending:
            future.result()
        self._pending = []
        if self._uploader is not None:
            self._uploader.shutdown()
        self._raise_upload_errors()

    # -- what the driver committed ---------------------------------------------------------------
    def on_committed(self, index: int, checkpoint: Checkpoint | None, metrics: dict, removed: list[int]) -> None:
        """The driver committed report ``index`` (``checkpoint`` None: it dropped its checkpoint);
        retention then deleted the reports ``removed``."""
        with self._commit_cond:
            self._committed[index] = (checkpoint, metrics)
            self._removed.update(removed)
            self._commit_cond.notify_all()

    def all_reported_checkpoints(self, timeout_s: float | None = None) -> list[ReportedCheckpoint]:
        """Checkpoints committed and still kept, once the driver has committed (or, when a rank's
        upload failed, dropped) every one this rank reported."""
        with self._commit_cond:
            self._commit_cond.wait_for(
                lambda: all(i in self._committed for i in self._reported_checkpoints), timeout_s)
            return [ReportedCheckpoint(*self._committed[i], ReportedCheckpointStatus.PENDING_VALIDATION
                                       if i in self._validated_reports else ReportedCheckpointStatus.COMMITTED)
                    for i in sorted(self._committed)
                    if i not in self._removed and self._committed[i][0] is not None]


_session: Session | None = None
_worker_context: TrainContext | None = None  # set when a worker joins, before its backend's on_start


def set_session(session: Session | None) -> None:
    global _session
    _session = session


def set_worker_context(context: TrainContext | None) -> None:
    global _worker_context
    _worker_context = context


def current_context(caller: str) -> TrainContext:
    """The running session's context, or on a worker whose training has not started yet (a
    backend's ``on_start`` functions), the worker's."""
    if _session is None and _worker_context is not None:
        return _worker_context
    return get_session(caller).context


def get_session(caller: str) -> Session:
    global _session
    if _session is None:
        _session = _script_session()  # a script run by `trainkit launch` reports through its worker
    if _session is None:
        raise RuntimeError(f"trainkit.{caller}() can only be called inside a training function run by a trainkit Trainer")
    return _session


def _script_session() -> Session | None:
    """In a script's process under ``trainkit launch``: a session whose reports go to its worker over
    the Unix socket ``LAUNCH_ADDRESS_ENV`` names (the worker's end: ``launch._Bridge``); None elsewhere."""
    if not os.environ.get(LAUNCH_ADDRESS_ENV):
        return None
    conn = Client(os.environ[LAUNCH_ADDRESS_ENV], family="AF_UNIX")
    context, storage, next_index, checkpoint = conn.recv()
    lock = threading.Lock()

    def send(report: Any) -> None:
        with lock:
            conn.send(report)

    session = Session(context, storage, send, next_index=next_index, checkpoint=checkpoint)
    atexit.register(session.finish)  # background uploads and hashing end before the process does
    return session
