"""``TrackingCallback``: what a tracker needs from a run, for writing one in a few lines."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainkit.callbacks import RunContext, UserCallback
from trainkit.tracking._scalars import flat_params, scalar_metrics

if TYPE_CHECKING:
    from trainkit.checkpoint import Checkpoint
    from trainkit.result import Result


class TrackingCallback(UserCallback):
    """A base for tracker callbacks: override ``open``, ``log_metrics`` and ``close`` (and
    ``log_checkpoint``). Every method runs in the driver. The step is the report's index, which keeps
    increasing across restarts and resumed runs; metrics are rank 0's numbers, nested dicts named
    ``outer/inner``; ``params`` is the ``train_loop_config`` flattened to ``outer.inner`` -> text.

    Example::

        class PrintTracker(TrackingCallback):
            def open(self, run_context, params):
                print("run", run_context.name, params)

            def log_metrics(self, metrics, step):
                print(step, metrics)

        run_config = trainkit.RunConfig(callbacks=[PrintTracker()])
    """

    _opened = False

    def open(self, run_context: RunContext, params: dict[str, str]) -> None:
        """The run starts (once per ``fit``): connect, create or find the tracker's run, log params."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """One report's numeric metrics."""

    def log_checkpoint(self, name: str, uri: str, step: int) -> None:
        """A checkpoint committed: ``name`` (``checkpoint_000003``) and where it is (path or URI)."""

    def close(self, failed: bool) -> None:
        """The run ended (``failed``: for good, after its retries)."""

    # -- UserCallback ------------------------------------------------------------------------------
    def on_run_start(self, run_context: RunContext) -> None:
        if not self._opened:
            self.open(run_context, flat_params(run_context.config))
            self._opened = True
        self.log_metrics({"trainkit/attempt": float(run_context.attempt)}, max(run_context.report_index + 1, 0))

    def after_report(self, run_context: RunContext, metrics: list[dict[str, Any]],
                     checkpoint: "Checkpoint | None") -> None:
        self.log_metrics(scalar_metrics(metrics[0]), run_context.report_index)
        if checkpoint is not None:
            self.log_checkpoint(checkpoint.path.rstrip("/").rsplit("/", 1)[-1], checkpoint.uri,
                                run_context.report_index)

    def on_run_end(self, run_context: RunContext, result: "Result") -> None:
        if self._opened:
            self._opened = False
            self.close(failed=result.error is not None)
