"""``TensorBoardCallback``: TensorBoard event files for a run."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from trainkit.callbacks import RunContext, UserCallback
from trainkit.tracking._scalars import require, scalar_metrics

if TYPE_CHECKING:
    from trainkit.checkpoint import Checkpoint
    from trainkit.result import Result


class TensorBoardCallback(UserCallback):
    """Writes TensorBoard event files: every report's numeric metrics (rank 0's, nested dicts as
    ``outer/inner``) as scalars with the report index as step, ``trainkit/attempt`` at each start,
    the ``train_loop_config`` as text, and each committed checkpoint's URI as text under
    ``checkpoint``. tensorboardX writes the files on its own thread.

    Args:
        log_dir: default ``<run directory>/tensorboard``; required when the run's storage is not
            local (point ``tensorboard --logdir`` at it).
    """

    def __init__(self, log_dir: str | os.PathLike | None = None):
        self.log_dir = os.fspath(log_dir) if log_dir is not None else None
        self._writer: Any = None

    def __getstate__(self) -> dict[str, Any]:  # the writer stays in the driver
        return {"log_dir": self.log_dir, "_writer": None}

    def on_run_start(self, run_context: RunContext) -> None:
        if self._writer is None:
            if self.log_dir is None and not os.path.isabs(run_context.path):  # an object store
                raise ValueError(f"TensorBoardCallback(log_dir=None) writes into the run directory, which is not "
                                 f"on local disk ({run_context.path!r}): pass log_dir")
            tensorboardx = require("tensorboardX", "tensorboard", "TensorBoardCallback")
            self._writer = tensorboardx.SummaryWriter(self.log_dir or os.path.join(run_context.path, "tensorboard"))
            if run_context.config:
                config = json.dumps(run_context.config, indent=2, default=str)
                self._writer.add_text("config", f"```\n{config}\n```", 0)
        self._writer.add_scalar("trainkit/attempt", run_context.attempt, max(run_context.report_index + 1, 0))

    def after_report(self, run_context: RunContext, metrics: list[dict[str, Any]],
                     checkpoint: "Checkpoint | None") -> None:
        step = run_context.report_index
        for key, value in scalar_metrics(metrics[0]).items():
            self._writer.add_scalar(key, value, step)
        if checkpoint is not None:
            self._writer.add_text("checkpoint", checkpoint.uri, step)
        self._writer.flush()

    def on_run_end(self, run_context: RunContext, result: "Result") -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
