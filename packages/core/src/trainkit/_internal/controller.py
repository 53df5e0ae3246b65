"""The driver side of a run: attempts, the long-poll loop, consolidation and checkpoint commits."""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from trainkit._internal import storage as storage_mod
from trainkit._internal.display import Display
from trainkit._internal.events import Failed, Finished, Output, Report
from trainkit._internal.ingest import datasets_per_rank
from trainkit._internal import faults
from trainkit._internal.lock import RunLock
from trainkit._internal.metrics_log import MetricsLog, read_metrics_log
from trainkit._internal.retry import StorageError
from trainkit._internal.plugins import get_plugins
from trainkit._internal.progress import ProgressWatch
from trainkit._internal.reservation import check_enclosing_reservation
from trainkit._internal.run_logs import RunLogs
from trainkit._internal.run_state import CheckpointRecord, RunState, start_profile
from trainkit._internal.session import SALVAGE_S, Session, TrainContext, set_session
from trainkit._internal.storage import FileEntry, RunStorage
from trainkit._internal.validation import Validator
from trainkit._internal.worker import call_train_fn, failure_event
from trainkit.backend import BackendConfig
from trainkit.callbacks import RunContext
from trainkit.checkpoint import Checkpoint
from trainkit.config import RunConfig, ScalingConfig
from trainkit.result import ControllerError, Result, TrainingFailedError, WorkerGroupError
from trainkit.validation import ValidationConfig

logger = logging.getLogger("trainkit")

POLL_S = 2.0  # a worker answers a poll at least this often (heartbeat)
ELASTIC_PLACEMENT_S = 10.0  # an elastic start waits this long for more than min_workers, then tries fewer
STATE_EVERY_S = 1.0  # run_state.json follows reports without a checkpoint at most this often


@dataclass
class _Attempt:
    error: TrainingFailedError | None = None
    return_value: Any = None
    worker_errors: dict[int, BaseException] = field(default_factory=dict)
    resize_to: int | None = None  # elastic: stopped to restart at this size (resources returned)


def _training_error(event: Failed) -> TrainingFailedError:
    error = WorkerGroupError(
        f"rank {event.rank} raised {event.type_name}: {event.message}\n\nWorker traceback:\n{event.traceback}",
        {event.rank: event.exception or RuntimeError(f"{event.type_name}: {event.message}")},
        rank=event.rank, error_type=event.type_name, worker_traceback=event.traceback)
    error.__cause__ = event.exception
    return error


def _forwarded_env() -> dict[str, str]:
    """trainkit's own settings follow the driver to its workers."""
    return {k: v for k, v in os.environ.items() if k.startswith("TRAINKIT_")}


class Controller:
    def __init__(self, *, train_fn: Callable, train_loop_config: dict | None, backend_config: BackendConfig,
                 scaling_config: ScalingConfig, run_config: RunConfig, datasets: dict[str, Any] | None,
                 default_name: str, validation_config: ValidationConfig | None = None):
        self.train_fn = train_fn
        self.train_loop_config = train_loop_config
        self.backend_config = backend_config
        self.scaling = scaling_config
        self.run_config = run_config
        self.datasets = datasets
        self.storage = RunStorage(run_config.storage_path, run_config.name or default_name,
                                  run_config.storage_filesystem)
        self.display = Display(run_config.verbose, self.storage.name)
        self.logs = RunLogs(self.storage)
        self.metrics_log = MetricsLog(self.storage)
        self.plugins = get_plugins()
        self.callbacks = [*run_config.callbacks, *(
            callback for added in self.plugins.hook.trainkit_default_callbacks(run_config=run_config)
            for callback in added or ())]
        self.validator = validation_config and Validator(validation_config, use_ray=not scaling_config.local_mode)
        self.state: RunState | None = None
        self.resumed_from: str | None = None
        self._pending: dict[int, dict[int, Report]] = {}
        self._acks: dict[int, list] = {}
        self._warned_differing: set[str] = set()  # checkpoint files whose ranks' copies differed
        self._world_size = 0
        self._local_session: Session | None = None
        self._ray_start_s: float | None = None  # this fit's, shown in its first attempt's profile
        self._first_attempt = 0
        self._start_marks: dict[str, float] = {}  # the attempt's, until its first report
        self._import_s: list[float] = []
        self._unsaved = False  # reports since run_state.json was last written

    # -- run -------------------------------------------------------------------------------------
    def run(self) -> Result:
        logger.setLevel(self.run_config.logging_config.log_level)
        storage = self.storage
        storage.preflight()  # an unusable storage path fails here, before any worker exists
        lock = RunLock(storage)
        lock.acquire()
        try:
            if not self.scaling.local_mode:
                from trainkit._internal.ray_runtime import check_can_ever_place, ensure_ray

                begin = time.monotonic()
                ensure_ray()
                check_can_ever_place(self.scaling)
                self._ray_start_s = time.monotonic() - begin
                check_enclosing_reservation(self.scaling.min_workers, self.scaling.worker_resources)
            self._prepare_state()
            self._first_attempt = self.state.attempt
            return self._run_attempts()
        except KeyboardInterrupt:
            self._interrupted()
        finally:
            lock.release()

    def _interrupted(self) -> None:
        """Ctrl-C: the attempt's workers are already stopped; record the run as interrupted and
        end the program with one line instead of a traceback through Ray's internals."""
        import sys

        state = self.state
        if state is not None:
            state.status, state.error = "interrupted", "interrupted by the user (Ctrl-C)"
            try:
                state.save(self.storage)
            except Exception as exc:  # noqa: BLE001 - the line below still says where the run stands
                self.display.note(f"could not record the interruption in {storage_mod.STATE}: {exc}")
        resume = f"; run it again with the same name to resume from {state.latest_checkpoint}" \
            if state is not None and state.latest_checkpoint else ""
        print(f"trainkit: run {self.storage.name!r} interrupted (Ctrl-C) after "
              f"{state.next_report_index if state else 0} report(s){resume}", file=sys.stderr, flush=True)
        raise SystemExit(130) from None  # 128 + SIGINT, as a shell reports it

    def _prepare_state(self) -> None:
        storage = self.storage
        state = RunState.recover(storage)
        if state is None:
            state = RunState(storage.name, backend=self.backend_config.name, num_workers=self.scaling.max_workers)
        else:
            state.attempt += 1
            state.next_report_index = max(state.next_report_index, self._last_logged_index() + 1)
        state.status, state.error = "running", None
        self.state = state
        self._select_resume_checkpoint()
        state.save(storage)

    def _select_resume_checkpoint(self) -> None:
        """Resume from the newest committed checkpoint whose files match its manifest."""
        state, storage = self.state, self.storage
        storage.sweep(c.name for c in state.checkpoints)
        for record in sorted(state.checkpoints, key=lambda c: c.index, reverse=True):
            try:
                storage_mod.verify_checkpoint(storage.fs, storage.path(record.name))
            except storage_mod.CheckpointCorruptError as exc:
                self.display.note(f"skipping checkpoint {record.name}: {exc}")
                state.checkpoints.remove(record)
                continue
            state.latest_checkpoint = self.resumed_from = record.name
            return
        state.latest_checkpoint = self.resumed_from = None

    def _run_attempts(self) -> Result:
        state, storage = self.state, self.storage
        self.display.start()
        failures, max_failures = 0, self.run_config.failure_config.max_failures
        size = None  # elastic: the size to try first (None: what fits)
        try:
            while True:
                self._callbacks("on_run_start", self._run_context())
                outcome = self._run_attempt(size)
                size = outcome.resize_to
                if size is not None:
                    self.display.note(f"resources returned: restarting with {size} workers from "
                                      f"{state.latest_checkpoint or 'scratch'}")
                    self._next_attempt()
                    continue
                if outcome.error is None:
                    state.status = "finished"
                    break
                failures += 1
                will_retry = max_failures == -1 or failures <= max_failures
                err = outcome.error
                state.failures.append({"attempt": state.attempt, "rank": err.rank, "type": err.error_type,
                                       "message": str(err).split("\n", 1)[0], "time": time.time()})
                self.plugins.hook.trainkit_on_failure(run_name=storage.name, attempt=state.attempt,
                                                      error=err, will_retry=will_retry)
                self._callbacks("after_exception", self._run_context(), outcome.worker_errors)
                if not will_retry:
                    state.status, state.error = "failed", str(err).split("\n", 1)[0]
                    break
                self.display.note(f"attempt {state.attempt} failed ({str(err).splitlines()[0]}); "
                                  f"restarting from {state.latest_checkpoint or 'scratch'}")
                if err.error_type == "WorkerStuck":  # where it hung, or a retry hides the bug
                    self.display.note(err.worker_traceback)
                self._next_attempt()
        finally:
            self.display.stop()
            self.logs.close()
        if self.validator:
            self._merge_validations(wait_all=True)
            self.validator.shutdown()
        try:
            # A killed attempt's worker can still be writing a temporary checkpoint dir for a moment
            # after the next attempt's start swept them; by now it is long gone.
            storage.sweep(c.name for c in state.checkpoints)
        except Exception as exc:  # noqa: BLE001 - best effort: the next start sweeps again
            self.display.note(f"could not remove temporary files: {exc}")
        try:
            state.save(storage)
        except StorageError as exc:
            if outcome.error is None:
                raise
            self.display.note(f"could not record the failure in {storage_mod.STATE}: {exc}")
        result = state.to_result(storage.fs, storage.run_path, self.run_config.checkpoint_config,
                                 error=outcome.error, return_value=outcome.return_value)
        self._callbacks("on_run_end", self._run_context(), result)
        self.display.summary(result, attempts=state.attempt + 1, reports=state.next_report_index,
                             checkpoint_config=self.run_config.checkpoint_config)
        return result

    def _next_attempt(self) -> None:
        self.state.attempt += 1
        self._pending.clear()
        self._acks.clear()
        self._select_resume_checkpoint()
        self.state.save(self.storage)

    def _last_logged_index(self) -> int:
        last = -1
        for record in read_metrics_log(self.storage.fs, self.storage.run_path):
            try:
                last = max(last, int(record["index"]))
            except (ValueError, TypeError):
                continue
        return last

    def _run_context(self) -> RunContext:
        state = self.state
        return RunContext(self.storage.name, self.storage.run_path, state.attempt, self._world_size,
                          report_index=state.next_report_index - 1, config=self.train_loop_config)

    def _callbacks(self, method: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, method)(*args)

    def _latest_checkpoint(self) -> Checkpoint | None:
        name = self.state.latest_checkpoint
        return Checkpoint(self.storage.path(name), self.storage.fs) if name else None

    # -- one attempt -----------------------------------------------------------------------------
    def _start_group(self, size: int | None) -> Any:
        """The attempt's worker group: ``max_workers``, or for an elastic run the most that fit
        (``size`` first when given), at least ``min_workers``, smaller while placement times out."""
        from trainkit._internal import elastic, worker_group

        scaling = self.scaling
        start = functools.partial(worker_group.WorkerGroup.start, scaling, run_name=self.storage.name,
                                  attempt=self.state.attempt, storage=self.storage,
                                  env={**_forwarded_env(), "TRAINKIT_VERBOSE": str(self.display.verbose)},
                                  prewarm_modules=self.backend_config.prewarm_modules)
        if not scaling.elastic:
            return start(scaling.max_workers)
        fit = lambda: elastic.workers_that_fit(scaling.worker_resources)  # noqa: E731
        n = max(scaling.min_workers, min(scaling.max_workers, size or fit()))
        while True:
            try:
                return start(n, placement_timeout_s=None if n == scaling.min_workers else ELASTIC_PLACEMENT_S)
            except worker_group.PlacementError:
                if n == scaling.min_workers:
                    raise
                n = max(scaling.min_workers, min(n - 1, fit()))

    def _run_attempt(self, size: int | None = None) -> _Attempt:
        if self.scaling.local_mode:
            return self._run_local()
        self.display.update(attempt=self.state.attempt, workers=0)
        backend = self.backend_config.backend_cls()
        outcome = _Attempt()
        group = None
        marks = {"begin": time.monotonic()}
        self._start_marks, self._import_s = {}, []
        try:
            group = self._start_group(size)
            num_workers = self._world_size = len(group)
            self.state.world_sizes.append(num_workers)
            self.plugins.hook.trainkit_setup_accelerators(worker_group=group, scaling_config=self.scaling,
                                                          backend_config=self.backend_config)
            backend.on_start(group, self.backend_config)
            backend.on_training_start(group, self.backend_config)
            marks.update(group.marks, backend=time.monotonic())
            import ray

            shards = datasets_per_rank(self.datasets, [w.node_id for w in group.workers])
            pickled_fn = ray.cloudpickle.dumps(self.train_fn)  # unpickled on the workers after their prewarm
            import_s = ray.get([w.actor.start.remote(pickled_fn, self.train_loop_config, self.backend_config,
                                                     self.storage, self.state.next_report_index,
                                                     self._latest_checkpoint(), shards[w.world_rank])
                                for w in group.workers])
            marks["launch"] = time.monotonic()
            self._start_marks, self._import_s = marks, [s for s in import_s if s is not None]
            self._record_start_profile()
            self.display.update(workers=num_workers)
            outcome = self._watch(group)
            if outcome.error is None and outcome.resize_to is None:
                try:
                    backend.on_shutdown(group, self.backend_config)
                except Exception as exc:  # noqa: BLE001 - training finished; a teardown error is no reason to rerun
                    self.display.note(f"backend shutdown failed after training finished: {type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a setup failure is an attempt failure
            if isinstance(exc, TrainingFailedError):
                outcome.error = exc
            else:
                outcome.error = ControllerError(f"attempt {self.state.attempt} failed in the driver: "
                                                f"{type(exc).__name__}: {exc}", exc, error_type=type(exc).__qualname__)
                outcome.error.__cause__ = exc
        finally:
            if group is not None:
                group.shutdown(graceful=outcome.error is None and outcome.resize_to is None)
            try:
                self.logs.end_attempt()
            except Exception as exc:  # noqa: BLE001 - the workers' logs are no reason to fail the run
                self.display.note(f"could not store the workers' logs of attempt {self.state.attempt}: {exc}")
        return outcome

    def _on_output(self, event: Output) -> None:
        if not event.progress:  # a progress bar's line is kept once finished
            self.logs.write(self.state.attempt, event.rank, event.text)
        self.display.worker_output(event.rank, event.text, progress=event.progress)

    def _watch(self, group: Any) -> _Attempt:
        import ray

        outcome = _Attempt()
        timeout_s = self.run_config.failure_config.worker_timeout_s
        refs: dict[Any, int] = {}
        last_seen = {w.world_rank: time.monotonic() for w in group.workers}
        running = set(last_seen)
        progress = ProgressWatch(self.run_config.failure_config.progress_timeout_s)

        def poll(rank: int) -> None:
            refs[group.workers[rank].actor.poll.remote(min(POLL_S, timeout_s / 2), self._acks.pop(rank, []))] = rank

        for rank in running:
            poll(rank)
        can_grow = self.scaling.elastic and len(group) < self.scaling.max_workers
        next_check = time.monotonic() + self.scaling.elastic_resize_monitor_interval_s
        while running and outcome.error is None and outcome.resize_to is None:
            ready, rest = ray.wait(list(refs), num_returns=1, timeout=min(POLL_S, timeout_s))
            if self.validator:
                self._merge_validations()
            if ready and rest:  # every rank that answered, not just the first: none looks hung
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            now = time.monotonic()
            for ref in ready:
                rank = refs.pop(ref)
                try:
                    events = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    outcome.error = WorkerGroupError(
                        f"rank {rank} died: its worker process exited unexpectedly ({type(exc).__name__})",
                        {rank: exc}, rank=rank, error_type="WorkerDied")
                    break
                except ray.exceptions.RayError as exc:  # e.g. an event that cannot be unpickled here
                    outcome.error = WorkerGroupError(f"rank {rank}: its events could not be received: {exc}",
                                                     {rank: exc}, rank=rank, error_type=type(exc).__name__)
                    break
                last_seen[rank] = now
                for event in events:
                    if isinstance(event, Report):
                        self._on_report(event)
                    elif isinstance(event, Output):
                        self._on_output(event)
                    elif isinstance(event, Finished):
                        running.discard(rank)
                        if rank == 0:
                            outcome.return_value = event.return_value
                    elif isinstance(event, Failed) and outcome.error is None:
                        outcome.error = _training_error(event)
                        outcome.worker_errors[rank] = outcome.error
                if rank in running and outcome.error is None:
                    poll(rank)
            hung = sorted(r for r in running if now - last_seen[r] > timeout_s)
            if hung and outcome.error is None:
                message = (f"rank(s) {hung} stopped responding for more than {timeout_s:g} s "
                           "(FailureConfig.worker_timeout_s)")
                outcome.error = WorkerGroupError(message, {r: TimeoutError(message) for r in hung},
                                                 rank=hung[0], error_type="WorkerHung")
            if outcome.error is None and (stuck := progress.check(group.workers, running)):
                outcome.error = outcome.worker_errors[stuck.rank] = stuck
            self._save_state_if_due()
            if can_grow and running and now >= next_check and outcome.error is None:
                from trainkit._internal.elastic import workers_that_fit

                next_check = now + self.scaling.elastic_resize_monitor_interval_s
                if extra := workers_that_fit(self.scaling.worker_resources):
                    outcome.resize_to = min(self.scaling.max_workers, len(group) + extra)
        if outcome.error is not None or outcome.resize_to is not None:
            self._salvage_reports(group, refs, failed=outcome.error.rank if outcome.error else None)
            return outcome
        self._warn_unmatched_reports()
        return outcome

    def _salvage_reports(self, group: Any, refs: dict[Any, int], failed: int | None) -> None:
        """A rank failed: commit what the other ranks had already reported (a checkpoint whose
        ``report()`` returned on every rank before the failure is not lost). Waits at most 0.25 s."""
        import ray

        pending = {ref: rank for ref, rank in refs.items() if rank != failed}
        for w in group.workers:
            if w.world_rank != failed:
                pending[w.actor.poll.remote(0, [])] = w.world_rank
        ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.25)
        for ref in ready:
            try:
                events = ray.get(ref)
            except ray.exceptions.RayError:
                continue
            for event in events:
                if isinstance(event, Output):
                    self._on_output(event)
                elif isinstance(event, Report):
                    try:
                        self._on_report(event)
                    except Exception as exc:  # noqa: BLE001 - the original failure is the one to report
                        self.display.note(f"could not commit report {event.index} after the failure: {exc}")
                        return

    def _run_local(self) -> _Attempt:
        self._world_size = 1
        context = TrainContext(world_rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0,
                               experiment_name=self.storage.name, attempt=self.state.attempt, storage=self.storage)
        # The training and upload threads both report; the session hands reports over one at a time.
        session = Session(context, self.storage, self._on_report, next_index=self.state.next_report_index,
                          checkpoint=self._latest_checkpoint(), datasets=datasets_per_rank(self.datasets, [None])[0])
        backend = self.backend_config.backend_cls()
        outcome = _Attempt()
        set_session(session)
        self._local_session = session
        self.display.update(attempt=self.state.attempt, workers=1)
        try:
            backend.on_local_start(self.backend_config)
            with self.backend_config.train_fn_context():
                outcome.return_value = call_train_fn(self.train_fn, self.train_loop_config)
            session.finish()
            backend.on_local_shutdown(self.backend_config)
        except Exception as exc:  # noqa: BLE001
            outcome.error = _training_error(failure_event(0, exc))
            outcome.worker_errors[0] = exc
            # Reports that returned before the error still commit (as a failed rank's peers' do on
            # Ray); whatever is still uploading after that must not land in the next attempt.
            session.salvage(timeout_s=SALVAGE_S)
        finally:
            set_session(None)
            self._local_session = None
        return outcome

    # -- consolidation ---------------------------------------------------------------------------
    def _record_start_profile(self) -> None:
        ray_start_s = self._ray_start_s if self.state.attempt == self._first_attempt else None
        self.state.start_profile = start_profile(self._start_marks, self._import_s, ray_start_s)

    def _on_report(self, report: Report) -> None:
        if self._start_marks and "first_report" not in self._start_marks:
            self._start_marks["first_report"] = time.monotonic()
            self._record_start_profile()
        self._pending.setdefault(report.index, {})[report.rank] = report
        while self._pending:  # consolidate complete reports strictly in index order
            index = min(self._pending)
            if len(self._pending[index]) < self._world_size:
                return
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
        if self.validator and self._local_session is not None:
            self._merge_validations()  # local mode has no watch loop: merge what finished
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
                files[path] = storage_mod.hash_file(storage.fs, with_files[0].tmp_path, path)
                if path not in self._warned_differing:
                    self._warned_differing.add(path)
                    logger.warning("checkpoint file %r: ranks %s wrote different contents than rank %d; kept "
                                   "one copy (rank-dependent state such as BatchNorm buffers?). Logged once.",
                                   path, ranks, with_files[0].rank)
            name = with_files[0].checkpoint_name
            path = storage.commit_checkpoint(with_files[0].tmp_path, name, files.values(),
                                             {"index": index, "attempt": state.attempt, "metrics": metrics})
            checkpoint = Checkpoint(path, storage.fs)
            state.add_checkpoint(CheckpointRecord(name, index, state.attempt, metrics))
        state.next_report_index = index + 1
        state.last_metrics = metrics
        self.metrics_log.append(
            {"index": index, "attempt": state.attempt, "time": time.time(), "checkpoint": name, "metrics": metrics})
        if checkpoint is not None:
            faults.point("before_state", index=index)
            # The restore source stays through this attempt's first commit (its ranks may still be
            # reading it when they report); after that every rank has moved past it.
            if validation is not None:
                self.validator.submit(name, checkpoint, None if validation is True else validation)
            keep = self._protected() | {self.resumed_from} - {None}
            dropped = state.apply_retention(self.run_config.checkpoint_config, keep)
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
            self._save_state_if_due()
        all_metrics = [reports[r].metrics for r in sorted(reports)]
        self.display.report(index, metrics, name)
        self.plugins.hook.trainkit_after_report(run_name=storage.name, index=index, metrics=metrics,
                                                all_metrics=all_metrics, checkpoint=checkpoint)
        self._callbacks("after_report", self._run_context(), all_metrics, checkpoint)

    def _save_state_if_due(self) -> None:
        """Keep run_state.json current between checkpoint commits (report count, last metrics), at
        most every ``STATE_EVERY_S``; a storage hiccup here waits for the next one."""
        if not self._unsaved or time.time() - self.state.updated < STATE_EVERY_S:
            return
        try:
            self.state.save(self.storage)
            self._unsaved = False
        except StorageError as exc:
            self.display.note(f"could not update {storage_mod.STATE} (retried at the next report): {exc}")

    def _acknowledge(self, index: int, checkpoint: Checkpoint | None, metrics: dict,
                     removed: list[int] | None = None) -> None:
        """Tell every rank report ``index`` is committed (``checkpoint`` None: without one) and
        which earlier reports' checkpoints retention ``removed``."""
        ack = (index, checkpoint, metrics, removed or [])
        if self._local_session is not None:
            self._local_session.on_committed(*ack)
        else:
            for rank in range(self._world_size):
                self._acks.setdefault(rank, []).append(ack)

    def _protected(self) -> set[str]:
        """Checkpoints retention must keep for now: those waiting for their validation."""
        return self.validator.pending if self.validator else set()

    def _merge_validations(self, wait_all: bool = False) -> None:
        """Merge finished validations into their checkpoints' metrics, then re-apply retention
        (a validated checkpoint is ranked by its new metrics)."""
        finished = self.validator.finished(wait_all)
        if not finished:
            return
        records = {record.name: record for record in self.state.checkpoints}
        for name, metrics in finished:
            self.display.note(f"validated {name}: {metrics}")
            if name in records:  # else a retention already dropped it: nothing to rank
                records[name].metrics = {**records[name].metrics, **metrics}
        keep = self._protected() | {self.resumed_from} - {None}
        dropped = self.state.apply_retention(self.run_config.checkpoint_config, keep)
        self.state.save(self.storage)
        for record in dropped:
            self.storage.delete_dir(self.storage.path(record.name))

    def _warn_unmatched_reports(self) -> None:
        for index, reports in sorted(self._pending.items()):
            missing = sorted(set(range(self._world_size)) - set(reports))
            self.display.note(f"report {index} was dropped: rank(s) {missing} never made it "
                              "(every rank must call report() the same number of times)")
        self._pending.clear()
