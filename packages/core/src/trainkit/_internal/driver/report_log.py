"""The report/commit log of a run: every rank's reports consolidated strictly in index order, each
complete one committed (checkpoint files, metrics log, run state, retention) and acknowledged to
the ranks. One per ``fit()``; the attempt runner feeds it, the controller reads the state it keeps."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Callable, Iterator

from trainkit._internal import faults
from trainkit._internal.display import Display
from trainkit._internal.driver import signals
from trainkit._internal.driver.validation import Validator
from trainkit._internal.storage import report_records
from trainkit._internal.storage import checkpoint_files
from trainkit._internal.storage import run_storage as storage_mod
from trainkit._internal.storage.metrics_log import MetricsLog
from trainkit._internal.storage.run_state import CheckpointRecord, RunState
from trainkit._internal.storage.run_storage import RunStorage
from trainkit._internal.storage.checkpoint_files import FileEntry
from trainkit._internal.worker.events import Report
from trainkit.checkpoint import Checkpoint
from trainkit.config import CheckpointConfig
from trainkit.errors import CheckpointCorruptError, StorageError

if TYPE_CHECKING:
    from trainkit._internal.worker.session import Session

logger = logging.getLogger("trainkit")

STATE_EVERY_S = 1.0  # run_state.json follows reports without a checkpoint at most this often

AfterReport = Callable[["list[dict]", "Checkpoint | None"], None]


class ReportLog:
    def __init__(self, state: RunState, storage: RunStorage, display: Display, metrics_log: MetricsLog,
                 checkpoint_config: CheckpointConfig, validator: Validator | None, after_report: AfterReport):
        self.state = state
        self.storage = storage
        self.display = display
        self.metrics_log = metrics_log
        self.checkpoint_config = checkpoint_config
        self.validator = validator
        self.after_report = after_report  # (every rank's metrics, the committed checkpoint)
        self.world_size = 0  # the attempt's, set by its runner
        self.local_session: Session | None = None  # local mode: acknowledgements go straight to it
        self.resumed_from: str | None = None
        self.required_ranks: set[int] | None = None  # relaxed by a preemption: the ranks a report waits for
        self._pending: dict[int, dict[int, Report]] = {}
        self._acks: dict[int, list] = {}
        self._warned_differing: set[str] = set()  # checkpoint files whose ranks' copies differed
        self._unsaved = False  # reports since run_state.json was last written
        self._batching = False  # inside batch()

    def new_attempt(self) -> None:
        """Forget the last attempt's incomplete reports and unsent acknowledgements; pick the checkpoint to resume from."""
        self._pending.clear()
        self._acks.clear()
        self.required_ranks = None
        self.select_resume_checkpoint()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """The metrics lines of the reports consolidated inside are written together, at the end
        (one PUT on an object store); a checkpoint's line is written at its commit."""
        self._batching = True
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.metrics_log.flush()  # the lines before the error; the error is the one to report
            raise
        finally:
            self._batching = False
        self.metrics_log.flush()

    def take_acks(self) -> list[tuple[int, list]]:
        """The acknowledgements not sent yet: (rank, its list)."""
        acks, self._acks = self._acks, {}
        return sorted(acks.items())

    def latest_checkpoint(self) -> Checkpoint | None:
        name = self.state.latest_checkpoint
        return Checkpoint(self.storage.path(name), self.storage.fs) if name else None

    def select_resume_checkpoint(self, sweep: bool = True) -> None:
        """Resume from the newest committed checkpoint whose files match its manifest, after
        sweeping what the last attempt left (``sweep=False``: the run's start, just swept by
        ``RunState.recover``; on an object store each sweep lists the run and reads every manifest)."""
        state, storage = self.state, self.storage
        if sweep:
            storage.sweep(c.name for c in state.checkpoints)
        for record in sorted(state.checkpoints, key=lambda c: c.index, reverse=True):
            try:
                checkpoint_files.verify_checkpoint(storage.fs, storage.path(record.name))
            except CheckpointCorruptError as exc:
                self.display.note(f"skipping checkpoint {record.name}: {exc}")
                state.checkpoints.remove(record)
                continue
            state.latest_checkpoint = self.resumed_from = record.name
            return
        state.latest_checkpoint = self.resumed_from = None

    def on_report(self, report: Report) -> None:
        if self.required_ranks is not None and report.index < self.state.next_report_index:
            return  # a preempted rank's copy of a report the others already committed
        self._pending.setdefault(report.index, {})[report.rank] = report
        self._consolidate_complete()

    def relax(self, ranks: set[int]) -> None:
        """``relax_collectives_on_preemption``: from now on a report is complete once ``ranks``
        (the ranks not preempted, rank 0 among them) made it."""
        self.required_ranks = set(ranks)
        self._consolidate_complete()

    def _consolidate_complete(self) -> None:
        while self._pending:  # consolidate complete reports strictly in index order
            index = min(self._pending)
            if self.required_ranks is None:
                if len(self._pending[index]) < self.world_size:
                    return
            elif not self.required_ranks <= self._pending[index].keys():
                return
            with signals.committing():  # a stop signal takes effect after the commit, never inside
                self._consolidate(index, self._pending.pop(index))

    def _consolidate(self, index: int, reports: dict[int, Report]) -> None:
        """Report ``index`` is complete: commit its checkpoint, log it, save state, apply retention.

        The order is the durability argument: files are committed (manifest + rename) before the
        state names them, and retention deletes only after the state stopped naming them.
        """
        state, storage = self.state, self.storage
        metrics = reports[0].metrics
        validation = reports[0].validation
        if validation is not None and self.validator is None:
            raise ValueError("report(validation=...) needs the trainer's validation_config=trainkit.ValidationConfig(fn)")
        if self.validator and self.local_session is not None:
            self.merge_validations()  # local mode has no watch loop: merge what finished
        checkpoint, name = None, None
        with_files = [r for r in reports.values() if r.tmp_path]
        if failed := sorted((r.rank, r.error) for r in reports.values() if r.error):
            # A rank's upload failed (its report() raised): the checkpoint is incomplete. The index
            # is closed with its metrics alone so later reports commit; the others' files go.
            self.display.note(f"report {index}: checkpoint dropped, rank {failed[0][0]}'s upload failed "
                              f"({failed[0][1]}); the run goes on from the previous checkpoint")
            for tmp_path in {r.tmp_path for r in with_files}:
                storage.delete_dir(tmp_path)
            with_files = []
        if with_files:
            names = {r.checkpoint_name for r in with_files}
            if len(names) > 1:
                raise ValueError(f"report {index}: ranks passed different checkpoint_dir_name values {sorted(names)}")
            files: dict[str, FileEntry] = {}
            with_files.sort(key=lambda r: r.rank)
            differing: dict[str, list[int]] = {}  # file -> ranks whose copy differs from the lowest rank's
            for r in with_files:
                for e in r.files:
                    if e.path in files and files[e.path].sha256 != e.sha256:
                        differing.setdefault(e.path, []).append(r.rank)
                    files.setdefault(e.path, e)
            for path, ranks in differing.items():
                # One copy is kept (rank 0's wherever the rank-0 copy can win the write, as on local
                # disks); the manifest records the bytes actually stored.
                files[path] = checkpoint_files.hash_file(storage.fs, with_files[0].tmp_path, path)
                if path not in self._warned_differing:
                    self._warned_differing.add(path)
                    logger.warning("checkpoint file %r: ranks %s wrote different contents than rank %d; kept "
                                   "one copy (rank-dependent state such as BatchNorm buffers?). Logged once.",
                                   path, ranks, with_files[0].rank)
            name = with_files[0].checkpoint_name
            path = storage.commit_checkpoint(with_files[0].tmp_path, name, files.values(),
                                             {"index": index, "attempt": state.attempt, "metrics": metrics})
            faults.point("after_commit", index=index)
            checkpoint = Checkpoint(path, storage.fs)
            state.add_checkpoint(CheckpointRecord(name, index, state.attempt, metrics))
        state.next_report_index = index + 1
        state.last_metrics = metrics
        self.metrics_log.append(
            {"index": index, "attempt": state.attempt, "time": time.time(), "checkpoint": name, "metrics": metrics})
        if checkpoint is not None or not self._batching:
            self.metrics_log.flush()
        if checkpoint is not None:
            faults.point("before_state", index=index)
            # The restore source stays through this attempt's first commit (its ranks may still be
            # reading it when they report); after that every rank has moved past it.
            if validation is not None:
                self.validator.submit(name, checkpoint, None if validation is True else validation)
            keep = self._protected() | {self.resumed_from} - {None}
            dropped = state.apply_retention(self.checkpoint_config, keep)
            self.resumed_from = None
            state.save(storage)
            faults.point("before_retention", index=index)
            for record in dropped:
                storage.delete_dir(storage.path(record.name))
            self._acknowledge(index, checkpoint, metrics, [record.index for record in dropped])
        if failed:  # the ranks that uploaded stop waiting for it in get_all_reported_checkpoints()
            self._acknowledge(index, None, metrics)
        if checkpoint is None:
            self._unsaved = True
            self.save_state_if_due()
        all_metrics = [reports[r].metrics for r in sorted(reports)]
        self.display.report(index, metrics, name)
        self.after_report(all_metrics, checkpoint)

    def save_state_if_due(self) -> None:
        """Keep run_state.json current between checkpoint commits (report count, last metrics), at
        most every ``STATE_EVERY_S``; a storage hiccup here waits for the next one."""
        if not self._unsaved or time.monotonic() - self.state.saved_at < STATE_EVERY_S:
            return
        try:
            self.metrics_log.flush()  # the log is never behind the state
            self.state.save(self.storage)
            self._unsaved = False
        except StorageError as exc:
            self.display.note(f"could not update {storage_mod.STATE} (retried at the next report): {exc}")

    def _acknowledge(self, index: int, checkpoint: Checkpoint | None, metrics: dict,
                     removed: list[int] | None = None) -> None:
        """Tell every rank report ``index`` is committed (``checkpoint`` None: without one) and
        which earlier reports' checkpoints retention ``removed``."""
        ack = (index, checkpoint, metrics, removed or [])
        if self.local_session is not None:
            self.local_session.on_committed(*ack)
        else:
            for rank in range(self.world_size):
                self._acks.setdefault(rank, []).append(ack)

    def _protected(self) -> set[str]:
        """Checkpoints retention must keep for now: those waiting for their validation."""
        return self.validator.pending if self.validator else set()

    def merge_validations(self, wait_all: bool = False) -> None:
        """Merge finished validations into their checkpoints' metrics, then re-apply retention
        (a validated checkpoint is ranked by its new metrics)."""
        finished = self.validator.finished(wait_all)
        if not finished:
            return
        records = {record.name: record for record in self.state.checkpoints}
        for name, metrics in finished:
            self.display.note(f"validated {name}: {metrics}", logging.INFO)
            if (record := records.get(name)) is not None:  # else a retention already dropped it
                record.validation = {**(record.validation or {}), **metrics}
                record.metrics = {**(record.metrics or {}), **metrics}
        keep = self._protected() | {self.resumed_from} - {None}
        dropped = self.state.apply_retention(self.checkpoint_config, keep)
        self.state.save(self.storage)
        for record in dropped:
            self.storage.delete_dir(self.storage.path(record.name))

    def commit_recorded(self, attempt: int) -> None:
        """``attempt`` is over (failed, or its driver died): commit, in index order, every report of it
        that every rank made, as an event received or a durable record (``report_records``), so a
        checkpoint whose ``report()`` returned on every rank is never lost; the rest is dropped."""
        records = report_records.read(self.storage, attempt, self.state.next_report_index)
        if records and not self.world_size:  # the next run, for its predecessor's last attempt
            self.world_size = records[0].world_size
        for record in records:
            if record.index >= self.state.next_report_index and record.world_size == self.world_size:
                self._pending.setdefault(record.index, {}).setdefault(record.rank, record)
        required = self.required_ranks or set(range(self.world_size))
        for index in sorted(self._pending):
            if not required <= self._pending[index].keys():
                continue  # noted by drop_unmatched
            reports = {rank: self._as_report(r) for rank, r in self._pending.pop(index).items()}
            if any(r is None for r in reports.values()):
                self.display.note(f"report {index} was dropped: a rank's recorded checkpoint files are gone")
                continue
            with signals.committing():
                self._consolidate(index, reports)

    def _as_report(self, item: "Report | report_records.Record") -> Report | None:
        if isinstance(item, Report):
            return item
        files = report_records.stored_files(self.storage, item)
        return None if files is None else Report(item.rank, item.index, item.metrics, item.checkpoint_name,
                                                 item.tmp_path, files)

    def drop_unmatched(self) -> None:
        for index, reports in sorted(self._pending.items()):
            missing = sorted(set(range(self.world_size)) - set(reports))
            self.display.note(f"report {index} was dropped: rank(s) {missing} never made it "
                              "(every rank must call report() the same number of times)")
        self._pending.clear()

