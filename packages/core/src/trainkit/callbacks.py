"""``UserCallback``: driver-side hooks into a run, passed in ``RunConfig(callbacks=[...])``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from trainkit.validation import check_int

if TYPE_CHECKING:
    from trainkit.checkpoint import Checkpoint, CheckpointIO
    from trainkit.result import Result

__all__ = ["MetricNames", "ReportCallbackBase", "RunContext", "UserCallback"]


@dataclass(frozen=True)
class RunContext:
    """What a callback knows about the run.

    ``report_index`` is the latest consolidated report's index (-1 before the first): the step that
    tracking callbacks log under, increasing across attempts and resumed runs. ``config`` is the
    trainer's ``train_loop_config``.
    """

    name: str
    path: str
    attempt: int
    num_workers: int
    report_index: int = -1
    config: Mapping[str, Any] | None = None


class UserCallback:
    """Override any method; all run in the driver, in order of the callbacks list.

    Example::

        class PrintLoss(trainkit.UserCallback):
            def after_report(self, run_context, metrics, checkpoint):
                print(run_context.name, metrics[0]["loss"])
    """

    def on_run_start(self, run_context: RunContext) -> None:
        """Before the first worker starts (and again for each restarted attempt)."""

    def after_report(self, run_context: RunContext, metrics: list[dict[str, Any]],
                     checkpoint: "Checkpoint | None") -> None:
        """Every rank made a report; ``metrics[r]`` is rank r's, ``checkpoint`` the committed one."""

    def after_exception(self, run_context: RunContext, worker_exceptions: dict[int, BaseException]) -> None:
        """An attempt failed; ``worker_exceptions`` maps rank to error."""

    def on_run_end(self, run_context: RunContext, result: "Result") -> None:
        """The run finished or failed for good."""


class MetricNames:
    """Which of a framework's results a plugin's report callback reports, and under which names:
    None (all of them), a name, a list of names, or ``{reported_name: framework_name}``.

    Example::

        names = MetricNames({"loss": "train-logloss"}, framework="XGBoost")
        trainkit.report(names.select({"train-logloss": 0.3, "train-error": 0.1}))   # {"loss": 0.3}
    """

    def __init__(self, metrics: str | list[str] | tuple[str, ...] | dict[str, str] | None, framework: str):
        if isinstance(metrics, str):
            metrics = [metrics]
        if isinstance(metrics, (list, tuple)):
            metrics = {name: name for name in metrics}
        if metrics is not None and not (isinstance(metrics, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in metrics.items())):
            raise ValueError(f"metrics={metrics!r} is invalid: expected None, a name, a list of names or a dict "
                             "{reported_name: framework_name}")
        self.mapping, self.framework = metrics, framework

    def select(self, results: dict[str, Any]) -> dict[str, Any]:
        if self.mapping is None:
            return dict(results)
        missing = [name for name in self.mapping.values() if name not in results]
        if missing:
            raise KeyError(f"ReportCallback(metrics=...) names {missing}, "
                           f"but {self.framework} reported {sorted(results)}")
        return {key: results[name] for key, name in self.mapping.items()}


class ReportCallbackBase:
    """What a plugin's round-based report callback shares: which metrics, the checkpoint every
    ``frequency`` rounds and at the end, saved by rank 0 through ``checkpoint_io_cls``, and
    ``get_model`` to load it back. The subclass (also deriving from the framework's callback class)
    calls ``report`` from the framework's hook.

    Example::

        class ReportCallback(ReportCallbackBase, xgboost.callback.TrainingCallback):
            CHECKPOINT_NAME = "model.ubj"
            checkpoint_io_cls = XGBoostCheckpointIO
            framework = "XGBoost"

            def after_iteration(self, model, epoch, evals_log):
                rounds = model.num_boosted_rounds()
                self.report({**results_of(evals_log), "iteration": rounds}, model, self.checkpoint_due(rounds))
    """

    CHECKPOINT_NAME: ClassVar[str]  # the default model file in the checkpoint
    checkpoint_io_cls: ClassVar[type["CheckpointIO"]]
    framework: ClassVar[str]  # named in errors

    def __init__(self, metrics: str | list[str] | dict[str, str] | None = None, filename: str | None = None,
                 frequency: int = 0, checkpoint_at_end: bool = True):
        check_int("frequency", frequency, 0, "0: only at the end")
        self._metrics = MetricNames(metrics, framework=self.framework)
        self._io = self.checkpoint_io_cls(filename or self.CHECKPOINT_NAME)
        self._frequency, self._checkpoint_at_end = frequency, checkpoint_at_end

    @classmethod
    def get_model(cls, checkpoint: "Checkpoint", filename: str | None = None) -> Any:
        """The model in a checkpoint this callback reported, verified against its manifest."""
        return cls.checkpoint_io_cls(filename or cls.CHECKPOINT_NAME).load(checkpoint)

    def checkpoint_due(self, rounds: int, last: bool = False) -> bool:
        """Whether the report after ``rounds`` rounds carries a checkpoint."""
        return (bool(self._frequency) and rounds % self._frequency == 0) or (last and self._checkpoint_at_end)

    def report(self, metrics: dict[str, Any], model: Any, with_checkpoint: bool) -> None:
        """``trainkit.report(metrics)`` on every rank; with a checkpoint of ``model`` saved by rank 0."""
        from trainkit.context import report

        if with_checkpoint:
            self._io.report(metrics, model)
        else:
            report(metrics)
