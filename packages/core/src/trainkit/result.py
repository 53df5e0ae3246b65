"""``Result``: what ``fit()`` returns, also readable later from a run directory."""

from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from trainkit._internal.storage import run_storage as storage_mod
from trainkit._internal.storage.metrics_log import read_metrics_log
from trainkit._internal.storage.run_state import RunState
from trainkit.checkpoint import Checkpoint
from trainkit.config import CheckpointConfig
from trainkit.errors import ControllerError, PreemptionError, TrainingFailedError, WorkerGroupError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["ControllerError", "PreemptionError", "Result", "TrainingFailedError", "WorkerGroupError"]


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
    # what the run ranks checkpoints by (CheckpointConfig's checkpoint_score_attribute and _order),
    # recorded in its run_state.json: get_best_checkpoint()'s default
    score_attribute: str | None = None
    score_order: Literal["max", "min"] = "max"

    @property
    def metrics_dataframe(self) -> Any:
        """Every consolidated report as a ``pandas.DataFrame`` (needs pandas): a column per metric
        reported, under its own name, and four about each report: ``report_index``, ``attempt``,
        ``checkpoint`` (its name, or None) and ``timestamp`` (UNIX seconds). Where a metric has one
        of those names, that column is ``trainkit_<name>`` instead (a metric is never replaced)."""
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("Result.metrics_dataframe needs pandas: pip install 'trainkit-core[pandas]'") from exc
        reports = read_metrics_log(self.filesystem or storage_mod.resolve_filesystem(self.path)[0], self.path)
        reported = {key for r in reports for key in r["metrics"]}
        names = {}
        for name in ("report_index", "attempt", "checkpoint", "timestamp"):
            names[name] = name
            while names[name] in reported:
                names[name] = f"trainkit_{names[name]}"
        return pd.DataFrame([{**r["metrics"], names["report_index"]: r["index"], names["attempt"]: r["attempt"],
                              names["checkpoint"]: r.get("checkpoint"), names["timestamp"]: r["time"]}
                             for r in reports])

    def get_best_checkpoint(self, metric: str | None = None, mode: Literal["max", "min"] | None = None) -> Checkpoint | None:
        """The kept checkpoint whose reported ``metric`` is best (NaN and missing values never win).
        Without ``metric``: by the run's ``checkpoint_score_attribute`` and ``_order`` (what the
        summary and ``trainkit show`` call best), else the latest checkpoint."""
        if metric is None:
            if self.score_attribute is None:
                return self.checkpoint
            metric, mode = self.score_attribute, mode or self.score_order
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
        fs, run_path = storage_mod.resolve_filesystem(path, storage_filesystem)
        state = RunState.load(fs, run_path)
        if state is None:
            raise FileNotFoundError(f"no trainkit run at {path!r} (no {storage_mod.STATE})")
        return cls.from_run_state(state, fs, run_path)

    @classmethod
    def from_run_state(cls, state: RunState, fs: "pafs.FileSystem", run_path: str,
                       config: CheckpointConfig | None = None, error: BaseException | None = None,
                       return_value: Any = None) -> "Result":
        """The result ``state`` records; best checkpoints first by ``config``'s ranking (default: the
        one the run recorded)."""
        def checkpoint(name: str) -> Checkpoint:
            return Checkpoint(posixpath.join(run_path, name), fs)

        state.fill_checkpoint_metrics(fs, run_path)
        config = config or state.score_config()
        ordered = state.ranked(config) if config.checkpoint_score_attribute else \
            sorted(state.checkpoints, key=lambda c: c.index)
        return cls(
            metrics=state.last_metrics,
            checkpoint=checkpoint(state.latest_checkpoint) if state.latest_checkpoint else None,
            path=run_path,
            filesystem=fs,
            error=error,
            best_checkpoints=[(checkpoint(c.name), c.metrics) for c in ordered],
            return_value=return_value,
            score_attribute=config.checkpoint_score_attribute,
            score_order=config.checkpoint_score_order,
        )

    def __repr__(self) -> str:
        parts = [f"metrics={self.metrics!r}", f"path={self.path!r}", f"checkpoint={self.checkpoint!r}"]
        if self.error is not None:
            parts.append(f"error={type(self.error).__name__}")
        return f"Result({', '.join(parts)})"
