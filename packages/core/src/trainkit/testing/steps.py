"""Building blocks for test training functions that checkpoint a step counter and resume from it."""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import trainkit


def resume_step() -> int:
    """The step after the one saved in ``trainkit.get_checkpoint()``, or 0 on a fresh start."""
    checkpoint = trainkit.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as path:
        return int(open(os.path.join(path, "step")).read()) + 1


def report_step(step: int, metrics: dict[str, Any], *, rank0_only: bool = False,
                files: dict[str, bytes] | None = None, checkpoint_dir_name: str | None = None) -> None:
    """``report(metrics)`` with a checkpoint holding ``step`` (plus ``files``); with ``rank0_only``
    the other ranks report metrics alone."""
    if rank0_only and trainkit.get_context().get_world_rank() != 0:
        trainkit.report(metrics)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in {"step": str(step).encode(), **(files or {})}.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        trainkit.report(metrics, checkpoint=trainkit.Checkpoint.from_directory(tmp),
                        checkpoint_dir_name=checkpoint_dir_name)


def wait_until_logged(reports: int) -> None:
    """Wait until the driver has logged ``reports`` consolidated reports of this run. A test that
    kills a rank waits for the commits it asserts on: a killed process loses what it had not sent."""
    from trainkit._internal.storage.metrics_log import read_metrics_log

    storage = trainkit.get_context().get_storage()
    while len(read_metrics_log(storage.fs, storage.run_path)) < reports:
        time.sleep(0.05)
