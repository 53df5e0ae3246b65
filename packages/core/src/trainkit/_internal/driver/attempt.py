"""One attempt of a run: start the worker group (elastic: the most that fit), launch the training
function, long-poll the ranks until they finish, fail, hang or the group can grow, stop the group.
Reports go to the run's ``ReportLog``; the controller decides what follows the ``AttemptResult``."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from trainkit._internal.cluster import ray_runtime
from trainkit._internal.display import Display
from trainkit._internal.driver import failures
from trainkit._internal.driver.debug_relay import DebugRelay
from trainkit._internal.driver.failure_policy import Outcome
from trainkit._internal.driver.progress import ProgressWatch
from trainkit._internal.driver.receiver import EventReceiver, Received
from trainkit._internal.driver.report_log import ReportLog
from trainkit._internal.storage.run_logs import LOGS, RunLogs
from trainkit._internal.storage.run_state import RunState, start_profile
from trainkit._internal.worker import spare
from trainkit._internal.worker.actor import call_train_fn, failure_event
from trainkit._internal.worker.context_types import PreemptionInfo, TrainContext
from trainkit._internal.worker.events import Failed, Finished, Output, Preempted, Report
from trainkit._internal.worker.ingest import datasets_per_rank
from trainkit._internal.worker.preemption import PreemptionWatch, died_of_preemption
from trainkit._internal.worker.session import SALVAGE_S, Session, set_session
from trainkit.backend import BackendConfig, WorkerInfo
from trainkit.config import FailureConfig, ScalingConfig
from trainkit.errors import (ControllerError, FailureKind, PlacementError, PreemptionError, TrainingFailedError,
                             WorkerGroupError)

POLL_S = 2.0  # a worker answers a poll at least this often (heartbeat)
# after a failure, how long a live rank may take to hand over what it holds: an actor call, which on a
# loaded machine took over 1 s (a returned report was lost); only a rank hung as well waits it out
SALVAGE_ANSWER_S = 10.0
ELASTIC_PLACEMENT_S = 10.0  # an elastic start waits this long for more than min_workers, then tries fewer
TAIL_LINES = 20  # of a dead rank's output, shown in its error


@dataclass
class AttemptResult:
    error: TrainingFailedError | None = None
    return_value: Any = None
    worker_errors: dict[int, BaseException] = field(default_factory=dict)
    resize_to: int | None = None  # elastic: stopped to restart at this size (resources returned)

    def outcome(self) -> Outcome:
        """What the failure policy sees of it."""
        return Outcome(error_type=self.error and self.error.error_type, failed=self.error is not None,
                       resize_to=self.resize_to, preempted=isinstance(self.error, PreemptionError),
                       storage_full=failures.storage_full(self.error))


_NOT_FORWARDED = {"PWD", "OLDPWD", "SHLVL", "_"}  # the shell's, of the driver's process only
ACCELERATOR_ENV = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "NEURON_RT_VISIBLE_CORES",
                   "TPU_VISIBLE_CHIPS", "ONEAPI_DEVICE_SELECTOR", "HABANA_VISIBLE_MODULES", "ASCEND_RT_VISIBLE_DEVICES")


def _forwarded_env(resources: Mapping[str, float]) -> dict[str, str]:
    """trainkit's own settings follow the driver to its workers. On an attached cluster (a runtime
    plugin's, e.g. the warm one) the driver's whole environment does (less Ray's own), as the
    embedded cluster's workers inherit it: those of an attached cluster are not the driver's children. Ray sets a worker's accelerator visibility itself
    when the worker holds some: the driver's then stays out."""
    if ray_runtime.attached_cluster() is None:
        return {k: v for k, v in os.environ.items() if k.startswith("TRAINKIT_")}
    ray_sets = ACCELERATOR_ENV if set(resources) - {"CPU", "memory"} else ()
    return {k: v for k, v in os.environ.items()
            if not k.startswith("RAY_") and k not in _NOT_FORWARDED and k not in ray_sets}


class AttemptRunner:
    def __init__(self, *, train_fn: Callable, train_loop_config: dict | None, backend_config: BackendConfig,
                 scaling_config: ScalingConfig, failure_config: FailureConfig, datasets: dict[str, Any] | None,
                 reports: ReportLog, display: Display, logs: RunLogs, plugins: Any, ray_start_s: float | None,
                 debug_relay: DebugRelay | None = None, runtime_env: dict[str, Any] | None = None):
        self.train_fn = train_fn
        self.runtime_env = runtime_env  # the workers' Ray runtime_env (runtime_env.for_workers)
        self.train_loop_config = train_loop_config
        self.backend_config = backend_config
        self.scaling = scaling_config
        self.failure_config = failure_config
        self.datasets = datasets
        self.reports = reports
        self.storage = reports.storage
        self.display = display
        self.logs = logs
        self.plugins = plugins
        self.ray_start_s = ray_start_s  # this fit's, shown in its first attempt's profile
        self.debug_relay = debug_relay  # the ranks' breakpoint()
        self._start_marks: dict[str, float] = {}  # the attempt's, until its first report
        self._import_s: list[float] = []
        self._tails: dict[int, deque[str]] = {}  # each rank's last lines of output, this attempt
        self._first_attempt = reports.state.attempt
        spare.fit_started()
        self._preemption: PreemptionWatch | None = None  # the attempt's
        self._gone: set[int] = set()  # preempted ranks that died while the others went on (relaxed)
        self._avoid_nodes: frozenset[str] = frozenset()  # the last attempt's unreachable nodes: the next one avoids them

    @property
    def state(self) -> RunState:
        return self.reports.state

    def _start_group(self, size: int | None) -> Any:
        """The attempt's worker group: ``max_workers``, or for an elastic run the most that fit
        (``size`` first when given), at least ``min_workers``, smaller while placement times out."""
        from trainkit._internal.driver import elastic
        from trainkit._internal.worker import worker_group

        scaling = self.scaling
        start = functools.partial(worker_group.WorkerGroup.start, scaling, run_name=self.storage.name,
                                  attempt=self.state.attempt, storage=self.storage,
                                  env={**_forwarded_env(scaling.worker_resources),
                                       **(self.debug_relay.env if self.debug_relay else {}),
                                       "TRAINKIT_VERBOSE": str(self.display.verbose)},
                                  prewarm_modules=self.backend_config.prewarm_modules, avoid_nodes=self._avoid_nodes,
                                  runtime_env=self.runtime_env)
        if not scaling.elastic:
            return start(scaling.max_workers)
        fit = lambda: elastic.workers_that_fit(scaling.worker_resources, avoid_nodes=self._avoid_nodes)  # noqa: E731
        n = max(scaling.min_workers, min(scaling.max_workers, size or fit()))
        while True:
            try:
                return start(n, placement_timeout_s=None if n == scaling.min_workers else ELASTIC_PLACEMENT_S)
            except PlacementError:
                if n == scaling.min_workers:
                    raise
                n = max(scaling.min_workers, min(n - 1, fit()))

    def run(self, size: int | None = None) -> AttemptResult:
        if self.scaling.local_mode:
            return self._run_local()
        self.display.update(attempt=self.state.attempt, workers=0)
        backend = self.backend_config.backend_cls()
        outcome = AttemptResult()
        group = None
        ended_whole = False  # the training function ended on every worker
        marks = {"begin": time.monotonic()}
        self._start_marks, self._import_s, self._tails = {}, [], {}
        try:
            group = self._start_group(size)
            num_workers = self.reports.world_size = len(group)
            self.state.world_sizes.append(num_workers)
            self.plugins.hook.trainkit_setup_accelerators(worker_group=group, scaling_config=self.scaling,
                                                          backend_config=self.backend_config)
            backend.on_start(group, self.backend_config)
            backend.on_training_start(group, self.backend_config)
            marks.update(group.marks, backend=time.monotonic())
            import ray

            shards = datasets_per_rank(self.datasets, [w.node_id for w in group.workers])
            pickled_fn = ray.cloudpickle.dumps(self.train_fn)  # unpickled on the workers after their prewarm
            import_s = ray.get([group.call(w.world_rank, "start", pickled_fn, self.train_loop_config,
                                           self.backend_config, self.storage, self.state.next_report_index,
                                           self.reports.latest_checkpoint(), shards[w.world_rank])
                                for w in group.workers])
            marks["launch"] = time.monotonic()
            self._start_marks, self._import_s = marks, [s for s in import_s if s is not None]
            self._record_start_profile()
            if self._may_restart() or spare.fits_in_a_row():
                group.prestart_next()  # a restart, or the next fit of a loop, then finds its workers ready
            self.display.update(workers=num_workers)
            outcome = self._watch(group)
            if outcome.error is None and outcome.resize_to is None:
                ended_whole = True
                try:
                    backend.on_shutdown(group, self.backend_config)
                except Exception as exc:  # noqa: BLE001 - training finished; a teardown error is no reason to rerun
                    self.display.note(f"backend shutdown failed after training finished: {type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a setup failure is an attempt failure
            if cluster_down := self._cluster_down():  # what the setup's error comes from
                outcome.error = cluster_down
            elif isinstance(exc, TrainingFailedError):
                outcome.error = exc
            else:
                outcome.error = ControllerError(f"attempt {self.state.attempt} failed in the driver: "
                                                f"{type(exc).__name__}: {exc}", exc, error_type=type(exc).__qualname__)
                outcome.error.__cause__ = exc
        finally:
            self._avoid_nodes = frozenset()
            if outcome.error is not None and outcome.error.error_type == FailureKind.CLUSTER_DIED:
                ray_runtime.abandon_embedded_cluster()  # the group went with it: nothing to stop or ask
                group = None
            if group is not None:
                if outcome.error is not None:
                    self._avoid_nodes = failures.unreachable_nodes(outcome.error, group)
                try:
                    if not ended_whole:
                        self._abort(backend, group)
                finally:
                    group.shutdown(graceful=outcome.error is None and outcome.resize_to is None,
                                   keep_placement=outcome.error is not None and self._may_restart()
                                   and not failures.cut_off_a_node(outcome.error, group))
            try:
                self.logs.end_attempt()
            except Exception as exc:  # noqa: BLE001 - the workers' logs are no reason to fail the run
                self.display.note(f"could not store the workers' logs of attempt {self.state.attempt}: {exc}")
        return outcome

    def end_run(self) -> None:
        """The run ends: the placement group a failed attempt kept for its restart is freed."""
        from trainkit._internal.worker import worker_group

        worker_group.release_kept_placement()

    def _may_restart(self) -> bool:
        """Whether a failure of this attempt may still be retried (``max_failures`` not spent)."""
        budget = self.failure_config.max_failures
        return budget == -1 or self.state.attempt < budget

    def _abort(self, backend: Any, group: Any) -> None:
        try:
            backend.on_abort(group, self.backend_config)
        except Exception as exc:  # noqa: BLE001 - the workers are killed next regardless
            self.display.note(f"backend abort failed: {type(exc).__name__}: {exc}")

    def _on_output(self, event: Output) -> None:
        if not event.progress:  # a progress bar's line is kept once finished
            self.logs.write(self.state.attempt, event.rank, event.text)
            self._tails.setdefault(event.rank, deque(maxlen=TAIL_LINES)).extend(event.text.split("\n"))
        self.display.worker_output(event.rank, event.text, progress=event.progress)

    def _watch(self, group: Any) -> AttemptResult:
        outcome = AttemptResult()
        timeout_s = self.failure_config.worker_timeout_s
        running = {w.world_rank for w in group.workers}
        progress = ProgressWatch(self.failure_config.progress_timeout_s)
        receiver = EventReceiver(group, poll_s=min(POLL_S, timeout_s / 2))
        unhandled: list[Received] = []
        can_grow = self.scaling.elastic and len(group) < self.scaling.max_workers
        next_check = time.monotonic() + self.scaling.elastic_resize_monitor_interval_s
        preemption = self._preemption = PreemptionWatch(group.workers, self.failure_config.preemption_grace_s)
        self._gone = set()
        try:
            while running and outcome.error is None and outcome.resize_to is None:
                received = receiver.get(timeout=min(POLL_S, timeout_s))
                if cluster_down := self._cluster_down():  # before the ranks' errors, which it caused
                    outcome.error = cluster_down
                    break
                if self.reports.validator:
                    self.reports.merge_validations()
                with self.reports.batch():
                    for i, item in enumerate(received):
                        if outcome.error is not None:
                            unhandled = received[i:]
                            break
                        self._handle(item, outcome, running, group)
                self._send_acks(group)
                preemption.poll_drains()
                if (news := preemption.take_news()) is not None and outcome.error is None:
                    self._on_preemption(group, news)
                if outcome.error is None and running and preemption.deadline_passed():
                    outcome.error = preemption.error(drain_timed_out=True)
                now = time.monotonic()
                # a rank in the debugger, and its peers waiting for it, are neither hung nor stuck
                debugged = self.debug_relay is not None and self.debug_relay.debugged()
                if debugged:
                    progress.restart(group, running)
                hung = sorted(r for r, seconds in receiver.silent().items() if r in running and seconds > timeout_s)
                if hung and outcome.error is None and not debugged:
                    message = (f"rank(s) {hung} stopped responding for more than {timeout_s:g} s "
                               "(FailureConfig.worker_timeout_s)")
                    outcome.error = WorkerGroupError(message, {r: TimeoutError(message) for r in hung},
                                                     rank=hung[0], error_type=FailureKind.WORKER_HUNG)
                if outcome.error is None and not debugged and (stuck := progress.check(group, running)):
                    outcome.error = outcome.worker_errors[stuck.rank] = stuck
                self.reports.save_state_if_due()
                if can_grow and running and now >= next_check and outcome.error is None:
                    from trainkit._internal.driver.elastic import workers_that_fit

                    next_check = now + self.scaling.elastic_resize_monitor_interval_s
                    if extra := workers_that_fit(self.scaling.worker_resources):
                        outcome.resize_to = min(self.scaling.max_workers, len(group) + extra)
        finally:
            queued, outstanding = receiver.stop()
        failed = outcome.error.rank if outcome.error else None
        self._count_preemption(outcome)
        if outcome.error is not None or outcome.resize_to is not None:
            self._salvage_reports(group, unhandled + queued, outstanding, failed=failed)
            return outcome
        self.reports.drop_unmatched()
        return outcome

    def _cluster_down(self) -> ControllerError | None:
        """The run's own embedded cluster lost its GCS or raylet: the attempt ends now, named so."""
        if (down := ray_runtime.embedded_cluster_down()) is None:
            return None
        return ControllerError(f"{down}: every worker went with it (attempt {self.state.attempt})", None,
                               error_type=FailureKind.CLUSTER_DIED)

    def _handle(self, item: Received, outcome: AttemptResult, running: set[int], group: Any) -> None:
        """One poll's answer from ``item.rank``: its events in order, or why the poll failed."""
        import ray

        if item.error is not None:
            if self._may_go_on_without(item.rank):
                running.discard(item.rank)
                self._gone.add(item.rank)
                self.display.note(f"rank {item.rank} is gone (preempted); the other ranks go on until the deadline")
            elif isinstance(item.error, ray.exceptions.RayActorError):
                outcome.error = self._died(item.rank, item.error, group.workers[item.rank])
            else:  # e.g. an event that cannot be unpickled here
                outcome.error = WorkerGroupError(f"rank {item.rank}: its events could not be received: {item.error}",
                                                 {item.rank: item.error}, rank=item.rank,
                                                 error_type=type(item.error).__name__)
            return
        for event in item.events:
            if isinstance(event, Report):
                self._on_report(event)
            elif isinstance(event, Output):
                self._on_output(event)
            elif isinstance(event, Finished):
                running.discard(item.rank)
                if item.rank == 0:
                    outcome.return_value = event.return_value
            elif isinstance(event, Failed) and outcome.error is None:
                outcome.error = failures.training_error(event)
                outcome.worker_errors[item.rank] = outcome.error
            elif isinstance(event, Preempted):
                self._preemption.on_rank(item.rank, event.deadline_ms)

    def _on_preemption(self, group: Any, info: PreemptionInfo) -> None:
        """A new or wider preemption notice: every rank gets it (``get_preemption_info()``); with
        ``relax_collectives_on_preemption`` reports stop waiting for the preempted ranks."""
        group.call_each("mark_preempted", info)  # a rank that died meanwhile needs none
        survivors = set(range(len(group))) - set(info.preempted_ranks)
        relaxed = self.failure_config.relax_collectives_on_preemption and 0 in survivors
        if relaxed:
            self.reports.relax(survivors)
        deadline = (f"deadline in {info.deadline_ms / 1000 - time.time():.1f} s" if info.deadline_ms
                    else "no deadline given")
        relaxed_note = f"; reports wait only for rank(s) {sorted(survivors)}" if relaxed else ""
        self.display.note(f"preemption notice for rank(s) {info.preempted_ranks} ({deadline}), sent to every rank; "
                          f"the attempt ends at the deadline{relaxed_note}", logging.INFO)

    def _may_go_on_without(self, rank: int) -> bool:
        """A preempted rank died: with relaxed reports the others still commit, until the deadline."""
        return bool(self._preemption and self._preemption.is_preempted(rank) and self.reports.required_ranks
                    and rank not in self.reports.required_ranks)

    def _count_preemption(self, outcome: AttemptResult) -> None:
        """An attempt that ends during a preemption, short of finishing, ends by it: a rank's error
        then is the preemption's (peers of a preempted rank fail with it), counted against
        ``max_preemption_failures``; so is a death Ray marks as a preemption without a notice."""
        error, watch = outcome.error, self._preemption
        if isinstance(error, PreemptionError) or outcome.resize_to is not None:
            return
        if error is None:
            if self._gone:  # the others finished without the preempted ranks
                outcome.error = watch.error(drain_timed_out=False)
            return
        if watch.info is None and died_of_preemption(error):
            watch.on_rank(error.rank, None)  # no notice came: the rank's node is all we know
        if watch.info is not None:
            outcome.error = watch.error(drain_timed_out=False, cause=error)

    def _send_acks(self, group: Any) -> None:
        """Tell the ranks which reports committed, at once (a rank waiting in
        ``get_all_reported_checkpoints()`` has no event that would bring its next poll back sooner)."""
        for rank, acks in self.reports.take_acks():
            group.call(rank, "acknowledge", acks)  # a rank that died meanwhile needs none

    def _died(self, rank: int, exc: BaseException, worker: WorkerInfo) -> WorkerGroupError:
        log = self.storage.path(LOGS, f"attempt_{self.state.attempt}", f"rank_{rank}.txt")
        tail = "\n".join(self._tails.get(rank, ())) or "(none received)"
        return failures.rank_died(rank, exc, worker, self.state.attempt, log, tail)

    def _salvage_reports(self, group: Any, received: list[Received], outstanding: dict[Any, int],
                         failed: int | None) -> None:
        """A rank failed: commit what the other ranks had already reported (a checkpoint whose
        ``report()`` returned on every rank before the failure is not lost). Each live rank hands
        over what it holds (``Worker.drain``) and its poll in flight answers at once; a rank still
        uploading a returned report's checkpoint gets ``SALVAGE_S`` for it, as a failed rank's own
        uploads do. Nothing else is waited for: a rank that does not answer within ``SALVAGE_ANSWER_S``
        is given up."""
        import ray

        def collect(polls: dict[Any, int], drains: dict[Any, int], timeout_s: float) -> list[int]:
            """The answers' events into ``received``, in order; the ranks still uploading."""
            uploading, rank_of = [], {**polls, **drains}
            for ref in ray.wait(list(rank_of), num_returns=len(rank_of), timeout=timeout_s)[0]:
                try:
                    events = ray.get(ref)
                except ray.exceptions.RayError:
                    continue
                if ref in drains:
                    events, still_uploading = events
                    if still_uploading:
                        uploading.append(rank_of[ref])
                received.append(Received(rank_of[ref], events))
            return uploading

        live = [rank for rank in range(len(group)) if rank != failed]
        polls = {ref: rank for ref, rank in outstanding.items() if rank != failed}
        if uploading := collect(polls, group.call_each("drain", 0, ranks=live), SALVAGE_ANSWER_S):
            collect({}, group.call_each("drain", SALVAGE_S, ranks=uploading), SALVAGE_S + SALVAGE_ANSWER_S)
        index = None
        try:
            with self.reports.batch():
                for item in received:
                    for event in item.events:
                        if isinstance(event, Output):
                            self._on_output(event)
                        elif isinstance(event, Report) and item.rank != failed:
                            index = event.index
                            self._on_report(event)
                index = "recorded"
                self.reports.commit_recorded(self.state.attempt)  # what the dead ranks' records hold
        except Exception as exc:  # noqa: BLE001 - the original failure is the one to report
            self.display.note(f"could not commit report {index} after the failure: {exc}")

    def _run_local(self) -> AttemptResult:
        self.reports.world_size = 1
        context = TrainContext(world_rank=0, world_size=1, local_rank=0, local_world_size=1, node_rank=0,
                               experiment_name=self.storage.name, attempt=self.state.attempt, storage=self.storage)
        # The training and upload threads both report; the session hands reports over one at a time.
        session = Session(context, self.storage, self._on_report, next_index=self.state.next_report_index,
                          checkpoint=self.reports.latest_checkpoint(), datasets=datasets_per_rank(self.datasets, [None])[0])
        backend = self.backend_config.backend_cls()
        outcome = AttemptResult()
        set_session(session)
        self.reports.local_session = session
        self.display.update(attempt=self.state.attempt, workers=1)
        try:
            backend.on_local_start(self.backend_config)
            try:
                with self.backend_config.train_fn_context(), self._local_breakpoints():
                    outcome.return_value = call_train_fn(self.train_fn, self.train_loop_config)
                session.finish()
            finally:
                # The driver process lives on into a retry, whose on_local_start must find the
                # framework torn down (on Ray a failed attempt's processes simply end).
                backend.on_local_shutdown(self.backend_config)
        except Exception as exc:  # noqa: BLE001
            outcome.error = failures.training_error(failure_event(0, exc))
            outcome.worker_errors[0] = exc
            # Reports that returned before the error still commit (as a failed rank's peers' do on
            # Ray); whatever is still uploading after that must not land in the next attempt.
            session.salvage(timeout_s=SALVAGE_S)
        finally:
            set_session(None)
            self.reports.local_session = None
        return outcome

    def _local_breakpoints(self) -> Any:
        return self.debug_relay.in_this_process() if self.debug_relay else contextlib.nullcontext()

    def _record_start_profile(self) -> None:
        ray_start_s = self.ray_start_s if self.state.attempt == self._first_attempt else None
        self.state.start_profile = start_profile(self._start_marks, self._import_s, ray_start_s)

    def _on_report(self, report: Report) -> None:
        if self._start_marks and "first_report" not in self._start_marks:
            self._start_marks["first_report"] = time.monotonic()
            self._record_start_profile()
        self.reports.on_report(report)
