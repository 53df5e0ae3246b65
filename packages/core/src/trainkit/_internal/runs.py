"""Reading runs back from storage for the CLI: every run under a storage path, one run in full."""

from __future__ import annotations

import posixpath
from typing import Any

from trainkit._internal import storage as storage_mod
from trainkit._internal.run_state import RunState


def list_runs(storage_path: str) -> list[dict[str, Any]]:
    """A summary of every run directly under ``storage_path`` (local path or URI), newest first."""
    import pyarrow.fs as pafs

    fs, root = storage_mod.resolve_filesystem(storage_path)
    infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    runs = []
    for info in infos:
        if info.type == pafs.FileType.Directory and (state := RunState.load(fs, info.path)) is not None:
            runs.append({"name": state.name, "path": info.path, "status": state.status,
                         "attempts": state.attempt + 1, "reports": state.next_report_index,
                         "checkpoints": len(state.checkpoints), "last_metrics": state.last_metrics or {},
                         "updated": state.updated})
    return sorted(runs, key=lambda run: run["updated"], reverse=True)


def describe_run(run_path: str, metric: str | None = None, mode: str = "max") -> dict[str, Any]:
    """One run: its state, failures and checkpoints with their metrics, and the best checkpoint
    (by ``metric`` when given, else the latest)."""
    fs, path = storage_mod.resolve_filesystem(run_path)
    state = RunState.load(fs, path)
    if state is None:
        raise FileNotFoundError(f"no trainkit run at {run_path!r} (no {storage_mod.STATE})")
    if mode not in ("max", "min"):
        raise ValueError(f"mode={mode!r} is invalid: expected 'max' or 'min'")
    checkpoints = [{"name": c.name, "path": posixpath.join(path, c.name), "report_index": c.index,
                    "attempt": c.attempt, "metrics": c.metrics} for c in sorted(state.checkpoints, key=lambda c: c.index)]
    best = checkpoints[-1] if checkpoints else None
    if metric is not None:
        scored = [c for c in checkpoints if isinstance(c["metrics"].get(metric), (int, float))
                  and c["metrics"][metric] == c["metrics"][metric]]  # NaN never wins
        best = (max if mode == "max" else min)(scored, key=lambda c: c["metrics"][metric]) if scored else None
    return {"name": state.name, "path": path, "status": state.status, "backend": state.backend,
            "num_workers": state.num_workers, "attempts": state.attempt + 1, "reports": state.next_report_index,
            "created": state.created, "updated": state.updated, "error": state.error,
            "failures": state.failures, "last_metrics": state.last_metrics or {}, "checkpoints": checkpoints,
            "best_checkpoint": best and {**best, "by": metric or "latest"}}
