"""``UserCallback``: driver-side hooks into a run, passed in ``RunConfig(callbacks=[...])``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from trainkit.checkpoint import Checkpoint
    from trainkit.result import Result

__all__ = ["MetricNames", "RunContext", "UserCallback"]


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
