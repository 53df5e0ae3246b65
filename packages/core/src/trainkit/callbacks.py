"""``UserCallback``: driver-side hooks into a run, passed in ``RunConfig(callbacks=[...])``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from trainkit._internal.moved import moved_names

if TYPE_CHECKING:
    from trainkit.checkpoint import Checkpoint

__all__ = ["RunContext", "UserCallback"]

# Moved to trainkit.framework (above this module's layer); importable from here, with a
# DeprecationWarning, for one minor release.
__getattr__ = moved_names(__name__, {"MetricNames": "trainkit.framework", "ReportCallbackBase": "trainkit.framework"})


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

    def on_run_end(self, run_context: RunContext, result: Any) -> None:
        """The run finished or failed for good; ``result`` is its ``trainkit.Result`` (typed ``Any``:
        the result module sits above this one, see docs/architecture.md)."""
