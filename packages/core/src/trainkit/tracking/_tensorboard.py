"""``TensorBoardCallback``: TensorBoard event files for a run."""

from __future__ import annotations

import json
import os
from typing import Any

from trainkit.callbacks import RunContext
from trainkit.tracking._base import TrackingCallback
from trainkit.tracking._scalars import require


class TensorBoardCallback(TrackingCallback):
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

    def open(self, run_context: RunContext, params: dict[str, str]) -> None:
        if self.log_dir is None and not os.path.isabs(run_context.path):  # an object store
            raise ValueError(f"TensorBoardCallback(log_dir=None) writes into the run directory, which is not "
                             f"on local disk ({run_context.path!r}): pass log_dir")
        tensorboardx = require("tensorboardX", "tensorboard", "TensorBoardCallback")
        self._writer = tensorboardx.SummaryWriter(self.log_dir or os.path.join(run_context.path, "tensorboard"))
        if run_context.config:
            config = json.dumps(run_context.config, indent=2, default=str)
            self._writer.add_text("config", f"```\n{config}\n```", 0)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def log_checkpoint(self, name: str, uri: str, step: int) -> None:
        self._writer.add_text("checkpoint", uri, step)

    def close(self, failed: bool) -> None:
        self._writer.close()
        self._writer = None
