"""Reading runs back from storage for the CLI: every run under a storage path, one run in full."""

from __future__ import annotations

import os
import posixpath
from typing import Any

from trainkit._internal import storage as storage_mod
from trainkit._internal.metrics_log import read_metrics_log
from trainkit._internal.run_state import START_PHASES, RunState


def locate_run(run: str) -> str:
    """A run's path or URI as given, or a bare run name looked up under the default storage path."""
    if "/" in run or os.path.exists(run):
        return run
    return posixpath.join(storage_mod.default_storage_path(), run)


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
    fs, path = storage_mod.resolve_filesystem(locate_run(run_path))
    state = RunState.load(fs, path)
    if state is None:
        raise FileNotFoundError(f"no trainkit run at {run_path!r} (no {storage_mod.STATE})")
    if mode not in ("max", "min"):
        raise ValueError(f"mode={mode!r} is invalid: expected 'max' or 'min'")
    checkpoints = [{"name": c.name, "path": posixpath.join(path, c.name), "report_index": c.index,
                    "attempt": c.attempt, "metrics": c.metrics}
                   for c in sorted(state.checkpoints, key=lambda c: c.index)]
    best = checkpoints[-1] if checkpoints else None
    if metric is not None:
        scored = [c for c in checkpoints if isinstance(c["metrics"].get(metric), (int, float))
                  and c["metrics"][metric] == c["metrics"][metric]]  # NaN never wins
        best = (max if mode == "max" else min)(scored, key=lambda c: c["metrics"][metric]) if scored else None
    return {"name": state.name, "path": path, "status": state.status, "backend": state.backend,
            "num_workers": state.num_workers, "attempts": state.attempt + 1, "reports": state.next_report_index,
            "created": state.created, "updated": state.updated, "error": state.error,
            "failures": state.failures, "world_sizes": state.world_sizes, "last_metrics": state.last_metrics or {}, "checkpoints": checkpoints,
            "start_profile": {phase: state.start_profile[phase] for phase in START_PHASES if phase in state.start_profile},
            "best_checkpoint": best and {**best, "by": metric or "latest"}}


def plot_metrics(run_path: str, metrics: list[str], output: str) -> dict[str, Any]:
    """Write a PNG of ``metrics`` over the run's reports: one panel per metric, committed
    checkpoints marked, restarts (a new attempt) as dashed lines. Returns what was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ImportError("trainkit plot needs matplotlib: pip install 'trainkit[plot]'") from exc
    fs, path = storage_mod.resolve_filesystem(locate_run(run_path))
    log = read_metrics_log(fs, path)
    if not log:
        raise FileNotFoundError(f"no reports in {run_path!r} (no {storage_mod.METRICS} or it is empty)")
    available = sorted({k for r in log for k, v in r["metrics"].items() if isinstance(v, (int, float))})
    missing = [m for m in metrics if m not in available]
    if missing:
        raise ValueError(f"--metric {', '.join(missing)}: not reported as a number; the run reported {available}")
    restarts = [r["index"] for prev, r in zip(log, log[1:]) if r["attempt"] != prev["attempt"]]
    fig, axes = plt.subplots(len(metrics), 1, sharex=True, squeeze=False, figsize=(8, 2.6 * len(metrics)))
    for ax, metric in zip(axes[:, 0], metrics):
        points = [(r["index"], r["metrics"][metric], bool(r.get("checkpoint"))) for r in log
                  if isinstance(r["metrics"].get(metric), (int, float))]
        ax.plot([p[0] for p in points], [p[1] for p in points], color="tab:blue", label=metric)
        ax.scatter([p[0] for p in points if p[2]], [p[1] for p in points if p[2]], color="tab:green",
                   zorder=3, label="checkpoint")
        for index in restarts:
            ax.axvline(index, color="tab:red", linestyle="--", linewidth=1)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    axes[-1, 0].set_xlabel("report")
    axes[-1, 0].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(f"{posixpath.basename(path)}" + (f" ({len(restarts)} restart(s), dashed)" if restarts else ""))
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)
    return {"output": output, "metrics": metrics, "reports": len(log), "restarts_at": restarts,
            "checkpoints": sum(bool(r.get("checkpoint")) for r in log)}
