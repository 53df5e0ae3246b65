"""The driver side of a run: the orchestrator. It prepares the run's state, runs attempts
(``attempt.AttemptRunner``) until the failure policy (``failure_policy``) says stop, and
finishes the run; reports are consolidated and committed by the ``report_log.ReportLog``."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from typing import Any, Callable

from trainkit._internal.cluster import ray_runtime
from trainkit._internal.cluster.reservation import check_enclosing_reservation
from trainkit._internal.display import Display
from trainkit._internal.driver.attempt import AttemptResult, AttemptRunner
from trainkit._internal.driver.debug_relay import DebugRelay, ray_init_keeps_breakpoints, users_hook
from trainkit._internal.driver.failure_policy import Decision, FailurePolicy, Outcome
from trainkit._internal.driver.report_log import ReportLog
from trainkit._internal.driver.signals import Interrupted, StopSignals
from trainkit._internal.driver.signals import describe as describe_signal
from trainkit._internal.driver.signals import settle as settle_commits
from trainkit._internal.driver.validation import Validator
from trainkit._internal.plugins import get_plugins
from trainkit._internal.storage import run_storage as storage_mod
from trainkit._internal.storage.lock import RunLock
from trainkit._internal.storage.metrics_log import MetricsLog, read_metrics_log
from trainkit._internal.storage.run_logs import RunLogs
from trainkit._internal.storage.run_state import RunState
from trainkit._internal.storage.run_storage import RunStorage
from trainkit._internal.tools.launch import LaunchConfig
from trainkit._internal.worker import runtime_env
from trainkit.backend import BackendConfig
from trainkit.callbacks import RunContext
from trainkit.checkpoint import Checkpoint
from trainkit.config import RunConfig, ScalingConfig
from trainkit.errors import FailureKind, PreemptionError, StorageError
from trainkit.result import Result
from trainkit.validation import ValidationConfig

logger = logging.getLogger("trainkit")
CLUSTER_GRACE_S = 10.0  # how long a dead cluster's failure is left to the main thread before a thread records it


def fork_server_of(backend_config: BackendConfig) -> tuple[type[BackendConfig] | None, bool]:
    """The framework an embedded cluster's fork server imports for a run of ``backend_config``
    (None: none), and whether it forks scripts: ``trainkit launch``'s, whose framework the launcher
    names."""
    scripts = isinstance(backend_config, LaunchConfig)
    framework = backend_config.framework if scripts else type(backend_config)
    return (framework if framework is not None and framework.fork_safe else None), scripts


class Controller:
    def __init__(self, *, train_fn: Callable, train_loop_config: dict | None, backend_config: BackendConfig,
                 scaling_config: ScalingConfig, run_config: RunConfig, datasets: dict[str, Any] | None,
                 default_name: str, validation_config: ValidationConfig | None = None):
        if run_config.worker_runtime_env and scaling_config.local_mode:
            raise ValueError("RunConfig(worker_runtime_env=...) needs Ray workers: with ScalingConfig(num_workers=0) "
                             "the training function runs in this process, where no runtime_env applies. "
                             "Use num_workers >= 1, or set the variables in this process.")
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
        self.callbacks = list(run_config.callbacks)
        self.validator = validation_config and Validator(validation_config, use_ray=not scaling_config.local_mode)
        failure_config = run_config.failure_config
        self.policy = FailurePolicy(failure_config.max_failures, failure_config.max_preemption_failures)
        self.state: RunState | None = None
        self.reports: ReportLog | None = None  # built with the state, by _prepare_state
        self._ray_start_s: float | None = None  # this fit's, shown in its first attempt's profile
        self.debug_relay: DebugRelay | None = None  # the ranks' breakpoint(), for the run's length
        self._ended = threading.Event()  # run() is over (see _cluster_died)
        self._runtime_env: dict[str, Any] | None = None  # the workers', working_dir uploaded

    # -- run -------------------------------------------------------------------------------------
    def run(self) -> Result:
        logger.setLevel(self.run_config.logging_config.log_level)
        storage = self.storage
        with StopSignals() as stop_signals:
            storage.preflight()  # an unusable storage path fails here, before any worker exists
            lock = RunLock(storage)
            lock.acquire()
            storage.fence = lock.check  # no write once the lease is lost
            try:
                breakpoints = users_hook()
                if not self.scaling.local_mode:
                    from trainkit._internal.cluster.ray_runtime import check_can_ever_place, ensure_ray

                    begin = time.monotonic()
                    with ray_init_keeps_breakpoints():
                        framework, scripts = fork_server_of(self.backend_config)
                        hook = self.plugins.hook
                        # a runtime plugin's cluster, else an embedded one: its workers fork from a server with
                        # the framework imported
                        ensure_ray(framework, scripts=scripts,
                                   attach=lambda kwargs: hook.trainkit_attach_cluster(ray_init_kwargs=kwargs))
                    stop_signals.install()  # Ray's start installs its own SIGTERM handler
                    check_can_ever_place(self.scaling)
                    self._runtime_env = runtime_env.for_workers(self.run_config.worker_runtime_env)
                    self._ray_start_s = time.monotonic() - begin
                    check_enclosing_reservation(self.scaling.min_workers, self.scaling.worker_resources)
                self.debug_relay = DebugRelay(self.display, breakpoints, serve=not self.scaling.local_mode)
                self._prepare_state()
                stop_watch = (lambda: None) if self.scaling.local_mode else \
                    ray_runtime.watch_embedded_cluster(self._cluster_died)  # local mode never imports Ray
                try:
                    return self._run_attempts(self._attempt_runner())
                finally:
                    self._ended.set()
                    stop_watch()
            except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP (signals.py)
                signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
                self._interrupted(self.policy.decide(Outcome(interrupted=True)), signum)
            finally:
                if self.debug_relay is not None:
                    self.debug_relay.close()
                lock.release()
                storage.fence = None

    def _cluster_died(self, what: str) -> None:
        """The embedded cluster lost its GCS or raylet (a thread's call): record the run failed now,
        before Ray can end this process (it does 60 s after losing its GCS, however stuck the main
        thread is in a call to it); the attempt ends by itself when its thread is not stuck."""
        if self._ended.wait(CLUSTER_GRACE_S):  # the attempt saw it too, and the run ended as it records
            return
        state = self.state
        message = f"{what}: every worker went with it (attempt {state.attempt})"
        try:
            failed = RunState.from_json(state.to_json())  # a copy: the main thread owns the state
            failed.status, failed.error = "failed", message
            failed.failures.append({"attempt": state.attempt, "rank": None, "type": str(FailureKind.CLUSTER_DIED),
                                    "message": message, "time": time.time()})
            failed.save(self.storage)
        except Exception as exc:  # noqa: BLE001 - the line below still says what happened
            message += f" (could not record it in {storage_mod.STATE}: {exc})"
        print(f"trainkit: run {self.storage.name!r} failed: {message}", file=sys.stderr, flush=True)

    def _interrupted(self, decision: Decision, signum: int) -> None:
        """A stop signal: the attempt's workers are already stopped; record the run as interrupted
        and end the program with one line instead of a traceback through Ray's internals."""
        state, how = self.state, describe_signal(signum)
        if state is not None:
            reason = decision.reason if signum == signal.SIGINT else f"stopped by {how}"
            state.status, state.error = "interrupted", reason
            settle_commits()
            try:
                # Temporary files of the commits the stop cut short (workers' uploads): none of them
                # is a checkpoint; the committed ones stay, each whole.
                self.storage.sweep(c.name for c in state.checkpoints)
                state.save(self.storage)
            except Exception as exc:  # noqa: BLE001 - the line below still says where the run stands
                self.display.note(f"could not record the interruption in {storage_mod.STATE}: {exc}")
        reports, latest = (state.next_report_index, state.latest_checkpoint) if state else (0, None)
        try:  # the commits are the truth: a signal may land between a commit and the state naming it
            if committed := self.storage.committed_checkpoints():
                reports, latest = max(reports, committed[-1]["index"] + 1), committed[-1]["name"]
        except Exception:  # noqa: BLE001 - storage unreachable: the state's view is all there is
            pass
        resume = f"; run it again with the same name to resume from {latest}" if latest else ""
        print(f"trainkit: run {self.storage.name!r} interrupted ({how}) after {reports} report(s){resume}",
              file=sys.stderr, flush=True)
        raise SystemExit(128 + signum) from None  # as a shell reports a program the signal ended

    def _prepare_state(self) -> None:
        storage = self.storage
        self._commit_recorded_reports()
        state = RunState.recover(storage)
        before = state and state.status
        if state is None:
            state = RunState(storage.name, backend=self.backend_config.name, num_workers=self.scaling.max_workers)
        else:
            state.attempt += 1
            state.next_report_index = max(state.next_report_index, self._last_logged_index() + 1)
        ranking = self.run_config.checkpoint_config
        state.checkpoint_score_attribute = ranking.checkpoint_score_attribute
        state.checkpoint_score_order = ranking.checkpoint_score_order
        state.status, state.error = "running", None
        self.state = state
        self.reports = ReportLog(state, storage, self.display, self.metrics_log, self.run_config.checkpoint_config,
                                 self.validator, self._after_report)
        self.reports.select_resume_checkpoint(sweep=False)  # RunState.recover swept: once per start
        if before is not None:  # a re-run of this name: say where it goes on from, in one line
            self.display.note(f"resuming run {storage.name!r} ({before} before) from "
                              f"{state.latest_checkpoint or 'scratch (no checkpoint)'}, at report "
                              f"{state.next_report_index}", logging.INFO)
        state.save(storage)

    def _commit_recorded_reports(self) -> None:
        """The last attempt of the run's previous driver, which died, may have left reports that
        returned on every rank but never reached it: commit them (``ReportLog.commit_recorded``),
        before ``RunState.recover``'s sweep removes their uploads and the records."""
        if not self.storage.exists(storage_mod.REPORTS):
            return
        state = RunState.load(self.storage.fs, self.storage.run_path)
        if state is not None:  # the callbacks see that attempt's state; _prepare_state then moves on
            state.next_report_index = max(state.next_report_index, self._last_logged_index() + 1)
            self.state, self.reports = state, ReportLog(state, self.storage, self.display, self.metrics_log,
                                                        self.run_config.checkpoint_config, None, self._after_report)
            self.reports.commit_recorded(state.attempt)

    def _attempt_runner(self) -> AttemptRunner:
        return AttemptRunner(train_fn=self.train_fn, train_loop_config=self.train_loop_config,
                             backend_config=self.backend_config, scaling_config=self.scaling,
                             failure_config=self.run_config.failure_config, datasets=self.datasets,
                             reports=self.reports, display=self.display, logs=self.logs, plugins=self.plugins,
                             ray_start_s=self._ray_start_s, debug_relay=self.debug_relay,
                             runtime_env=self._runtime_env)

    def _run_attempts(self, runner: AttemptRunner) -> Result:
        state = self.state
        self.display.start()
        size = None  # elastic: the size to try first (None: what fits)
        try:
            while True:
                self._callbacks("on_run_start", self._run_context())
                attempt = runner.run(size)
                decision = self.policy.decide(attempt.outcome())
                size = decision.size
                if decision.action == "resize":
                    self.display.note(f"{decision.reason} from {state.latest_checkpoint or 'scratch'}", logging.INFO)
                    self._next_attempt()
                    continue
                if decision.action == "finish":
                    state.status = "finished"
                    break
                self._record_failure(attempt)
                err = attempt.error
                if decision.action == "give_up":
                    if isinstance(err, PreemptionError):  # its own budget: say which one ran out
                        err.args = (f"{err}; {decision.reason}",)
                    state.status, state.error = "failed", str(err).split("\n", 1)[0]
                    break
                why = str(err).splitlines()[0]
                ended = f"was preempted ({why}; {decision.reason})" if isinstance(err, PreemptionError) \
                    else f"failed ({why})"
                self.display.note(f"attempt {state.attempt} {ended}; restarting from {state.latest_checkpoint or 'scratch'}")
                if decision.show_where:
                    self.display.note(err.worker_traceback)
                self._next_attempt()
        finally:
            runner.end_run()
            self.display.stop()
            self.logs.close()
        return self._finish(attempt)

    def _record_failure(self, attempt: AttemptResult) -> None:
        state, err = self.state, attempt.error
        state.failures.append({"attempt": state.attempt, "rank": err.rank, "type": err.error_type,
                               "message": str(err).split("\n", 1)[0], "time": time.time()})
        self._callbacks("after_exception", self._run_context(), attempt.worker_errors)

    def _finish(self, attempt: AttemptResult) -> Result:
        state, storage = self.state, self.storage
        if self.validator:
            self.reports.merge_validations(wait_all=True)
            self.validator.shutdown()
        try:
            # A killed attempt's worker can still be writing a temporary checkpoint dir for a moment
            # after the next attempt's start swept them; by now it is long gone.
            storage.sweep(c.name for c in state.checkpoints)
        except Exception as exc:  # noqa: BLE001 - best effort: the next start sweeps again
            self.display.note(f"could not remove temporary files: {exc}")
        try:
            self.metrics_log.flush()  # lines a failed write left
            state.save(storage)
        except StorageError as exc:
            if attempt.error is None:
                raise
            self.display.note(f"could not record the failure in {storage_mod.STATE}: {exc}")
        result = Result.from_run_state(state, storage.fs, storage.run_path, self.run_config.checkpoint_config,
                                       error=attempt.error, return_value=attempt.return_value)
        self._callbacks("on_run_end", self._run_context(), result)
        self.display.summary(result, attempts=state.attempt + 1, reports=state.next_report_index)
        return result

    def _next_attempt(self) -> None:
        self.state.attempt += 1
        self.reports.new_attempt()
        self.state.save(self.storage)

    def _last_logged_index(self) -> int:
        last = -1
        for record in read_metrics_log(self.storage.fs, self.storage.run_path):
            try:
                last = max(last, int(record["index"]))
            except (ValueError, TypeError):
                continue
        return last

    def _after_report(self, all_metrics: list[dict], checkpoint: Checkpoint | None) -> None:
        self._callbacks("after_report", self._run_context(), all_metrics, checkpoint)

    def _run_context(self) -> RunContext:
        state = self.state
        return RunContext(self.storage.name, self.storage.run_path, state.attempt, self.reports.world_size,
                          report_index=state.next_report_index - 1, config=self.train_loop_config)

    def _callbacks(self, method: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, method)(*args)
