"""``Result``: what ``fit()`` returns, also readable later from a run directory."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from trainkit._internal import storage as storage_mod
from trainkit._internal.metrics_log import read_metrics_log
from trainkit.checkpoint import Checkpoint

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["ControllerError", "PreemptionError", "Result", "TrainingFailedError", "WorkerGroupError"]


class TrainingFailedError(RuntimeError):
    """A worker raised or died. ``rank``, ``error_type`` and ``worker_traceback`` say where and why;
    ``__cause__`` is the original exception when it could be carried over."""

    def __init__(self, message: str, *, rank: int | None = None, error_type: str | None = None,
                 worker_traceback: str = ""):
        super().__init__(message)
        self.rank = rank
        self.error_type = error_type
        self.worker_traceback = worker_traceback


class WorkerGroupError(TrainingFailedError):
    """A worker raised, died or stopped answering (Ray Train's name). ``worker_failures`` maps
    each failed rank to its exception.

    Example::

        try:
            trainer.fit()
        except trainkit.WorkerGroupError as exc:
            print(exc.worker_failures)        # {1: ValueError('bad batch')}
    """

    def __init__(self, message: str, worker_failures: dict[int, BaseException] | None = None, **details: Any):
        super().__init__(message, **details)
        self.worker_failures = dict(worker_failures or {})


class ControllerError(TrainingFailedError):
    """The driver failed (starting workers, storage, a callback), not a worker (Ray Train's name);
    ``controller_failure`` is the original exception."""

    def __init__(self, message: str, controller_failure: BaseException | None = None, **details: Any):
        super().__init__(message, **details)
        self.controller_failure = controller_failure


class PreemptionError(TrainingFailedError):
    """Ray Train's error for a run stopped by node preemption. trainkit never raises it: a drained
    node or a SIGTERM'd worker is a failure, retried within ``FailureConfig.max_failures``
    (catching ``TrainingFailedError`` covers both)."""


@dataclass
class Result:
    """The outcome of a run.

    Example::

        result = trainer.fit()
        print(result.metrics["loss"], result.path)
        best = result.get_best_checkpoint("accuracy", "max")
        later = trainkit.Result.from_path("~/trainkit_results/my-run")
    """

    metrics: dict[str, Any] | None
    checkpoint: Checkpoint | None
    path: str
    filesystem: "pafs.FileSystem | None" = None
    error: BaseException | None = None
    best_checkpoints: list[tuple[Checkpoint, dict[str, Any]]] = field(default_factory=list)
    return_value: Any = None

    @property
    def metrics_dataframe(self) -> Any:
        """Every consolidated report as a ``pandas.DataFrame`` (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("Result.metrics_dataframe needs pandas: pip install 'trainkit-core[pandas]'") from exc
        rows = [{**r["metrics"], "report_index": r["index"], "attempt": r["attempt"],
                 "checkpoint": r.get("checkpoint"), "timestamp": r["time"]}
                for r in read_metrics_log(self.filesystem or storage_mod.resolve_filesystem(self.path)[0],
                                                      self.path)]
        return pd.DataFrame(rows)

    def get_best_checkpoint(self, metric: str, mode: Literal["max", "min"]) -> Checkpoint | None:
        """The kept checkpoint whose reported ``metric`` is best (NaN and missing values never win)."""
        if mode not in ("max", "min"):
            raise ValueError(f"mode={mode!r} is invalid: expected 'max' or 'min'")
        scored = [(m[metric], c) for c, m in self.best_checkpoints
                  if isinstance(m.get(metric), (int, float)) and not math.isnan(m[metric])]
        if not scored:
            return None
        pick = max if mode == "max" else min
        return pick(scored, key=lambda sc: sc[0])[1]

    @classmethod
    def from_path(cls, path: str, storage_filesystem: "pafs.FileSystem | None" = None) -> "Result":
        """Read a run's result from its directory (local path or URI)."""
        from trainkit._internal.run_state import RunState

        fs, run_path = storage_mod.resolve_filesystem(path, storage_filesystem)
        state = RunState.load(fs, run_path)
        if state is None:
            raise FileNotFoundError(f"no trainkit run at {path!r} (no {storage_mod.STATE})")
        return state.to_result(fs, run_path)

    def __repr__(self) -> str:
        parts = [f"metrics={self.metrics!r}", f"path={self.path!r}", f"checkpoint={self.checkpoint!r}"]
        if self.error is not None:
            parts.append(f"error={type(self.error).__name__}")
        return f"Result({', '.join(parts)})"
