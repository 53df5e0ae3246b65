"""Reading runs back from storage for the CLI: every run under a storage path, one run in full."""

from __future__ import annotations

import datetime
import os
import posixpath
import re
from typing import Any

from trainkit._internal.storage import run_storage as storage_mod
from trainkit._internal.storage.metrics_log import read_metrics_log
from trainkit._internal.storage.run_state import START_PHASES, RunState, is_score
from trainkit._internal.terminal import terminal_safe
from trainkit.config import CheckpointConfig

# names where lower is better: losses, errors, distances, perplexity, durations
_LOWER_IS_BETTER = re.compile(r"loss|err|mse|mae|rmse|mape|perplexity|ppl|wer|cer|regret|latency|time|(^|_)s$|seconds",
                              re.IGNORECASE)
X_AXES = ("index", "step", "time")


def infer_mode(metric: str) -> str:
    """'min' for a loss-like name (loss, val_error, mse, perplexity, epoch_time_s, ...), else 'max'."""
    return "min" if _LOWER_IS_BETTER.search(metric) else "max"


def locate_run(run: str) -> str:
    """A run's path or URI as given, or a bare run name looked up under the default storage path."""
    if "/" in run or os.path.exists(run):
        return run
    return posixpath.join(storage_mod.default_storage_path(), run)


def list_runs(storage_path: str) -> list[dict[str, Any]]:
    """A summary of every run directly under ``storage_path`` (local path or URI), newest first."""
    import pyarrow.fs as pafs

    fs, root = storage_mod.resolve_filesystem(storage_path)
    if fs.get_file_info(root).type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"no storage path {storage_path!r}")
    infos = fs.get_file_info(pafs.FileSelector(root))
    runs = []
    for info in infos:
        if info.type == pafs.FileType.Directory and (state := RunState.load(fs, info.path)) is not None:
            best = next(iter(state.ranked(state.score_config())), None)  # recorded scores: no manifest read
            runs.append({"name": state.name, "path": info.path, "status": state.status,
                         "attempts": state.attempt + 1, "reports": state.next_report_index,
                         "checkpoints": len(state.checkpoints), "best_checkpoint": best and best.name,
                         "best_by": state.checkpoint_score_attribute or "latest",
                         "last_metrics": state.last_metrics or {}, "updated": state.updated})
    return sorted(runs, key=lambda run: run["updated"], reverse=True)


def describe_run(run_path: str, metric: str | None = None, mode: str | None = None) -> dict[str, Any]:
    """One run: its state, failures and checkpoints with their metrics, and the best checkpoint
    (by ``metric`` when given, ``mode`` None: ``infer_mode(metric)``; else by what the run ranks
    checkpoints by, its ``checkpoint_score_attribute``; else the latest)."""
    fs, path = storage_mod.resolve_filesystem(locate_run(run_path))
    state = RunState.load(fs, path)
    if state is None:
        raise FileNotFoundError(f"no trainkit run at {run_path!r} (no {storage_mod.STATE}); "
                                "`trainkit runs` lists the runs")
    if mode not in ("max", "min", None):
        raise ValueError(f"mode={mode!r} is invalid: expected 'max' or 'min'")
    inferred = metric is not None and mode is None
    if metric is None:
        ranking, by = state.score_config(), "run"
    else:
        ranking, by = CheckpointConfig(checkpoint_score_attribute=metric,
                                       checkpoint_score_order=infer_mode(metric) if inferred else mode), "option"
    state.fill_checkpoint_metrics(fs, path)
    ranked = state.ranked(ranking)
    best = ranked[0].name if ranked else None
    if ranking.checkpoint_score_attribute and best and not is_score(ranked[0].metrics.get(ranking.checkpoint_score_attribute)):
        best = None  # no checkpoint has the metric (NaN never wins)
    checkpoints = [{"name": c.name, "path": posixpath.join(path, c.name), "report_index": c.index,
                    "attempt": c.attempt, "metrics": c.metrics}
                   for c in sorted(state.checkpoints, key=lambda c: c.index)]
    best_checkpoint = next((c for c in checkpoints if c["name"] == best), None)
    attribute = ranking.checkpoint_score_attribute
    return {"name": state.name, "path": path, "status": state.status, "backend": state.backend,
            "num_workers": state.num_workers, "attempts": state.attempt + 1, "reports": state.next_report_index,
            "created": state.created, "updated": state.updated, "error": state.error,
            "failures": state.failures, "world_sizes": state.world_sizes, "last_metrics": state.last_metrics or {}, "checkpoints": checkpoints,
            "start_profile": {phase: state.start_profile[phase] for phase in START_PHASES if phase in state.start_profile},
            "best_checkpoint": best_checkpoint and {
                **best_checkpoint, "by": attribute or "latest", "mode": attribute and ranking.checkpoint_score_order,
                "mode_inferred": inferred, "ranked_by_run": by == "run" and attribute is not None}}


def _checkpoint_dirs(fs: Any, path: str) -> set[str]:
    import pyarrow.fs as pafs

    return {info.base_name for info in fs.get_file_info(pafs.FileSelector(path))
            if info.type == pafs.FileType.Directory}


def _label(text: str) -> str:
    """Text drawn on the plot: control characters shown escaped, ``$`` a dollar sign (never
    matplotlib's mathtext, which fails the drawing on a bad formula)."""
    return terminal_safe(text).replace("$", r"\$")


def plot_metrics(run_path: str, metrics: list[str], output: str, x: str = "index") -> dict[str, Any]:
    """Write a PNG of ``metrics`` over the run's reports (``x``: report index, the reported ``step``
    or the wall-clock time): one panel per metric, checkpoints that still exist as green dots, deleted
    ones (retention) as hollow grey circles, each panel's best checkpoint as a star (max or min by
    ``infer_mode``), restarts (a new attempt) as dashed lines. Returns what was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError as exc:
        raise ImportError("trainkit plot needs matplotlib: pip install 'trainkit-core[plot]'") from exc
    if x not in X_AXES:
        raise ValueError(f"--x {x}: expected one of {', '.join(X_AXES)}")
    fs, path = storage_mod.resolve_filesystem(locate_run(run_path))
    log = read_metrics_log(fs, path)
    if not log:
        raise FileNotFoundError(f"no reports in {run_path!r} (no {storage_mod.METRICS} or it is empty)")
    available = sorted({k for r in log for k, v in r["metrics"].items() if isinstance(v, (int, float))})
    missing = [m for m in metrics if m not in available]
    if missing:
        raise ValueError(f"--metric {', '.join(missing)}: not reported as a number; the run reported {available}")
    if x == "step" and not all(isinstance(r["metrics"].get("step"), (int, float)) for r in log):
        raise ValueError(f"--x step needs a numeric 'step' in every report; the run reported {available}")

    def where(r: dict) -> Any:
        if x == "time":
            return datetime.datetime.fromtimestamp(r["time"])
        return r["metrics"]["step"] if x == "step" else r["index"]

    existing = _checkpoint_dirs(fs, path)
    restarts = [r for prev, r in zip(log, log[1:]) if r["attempt"] != prev["attempt"]]
    fig, axes = plt.subplots(len(metrics), 1, sharex=True, squeeze=False, figsize=(8, 2.8 * len(metrics)))
    best_names = {}
    for ax, metric in zip(axes[:, 0], metrics):
        points = [(where(r), r["metrics"][metric], r.get("checkpoint")) for r in log
                  if isinstance(r["metrics"].get(metric), (int, float))]
        ax.plot([p[0] for p in points], [p[1] for p in points], color="tab:blue", label=_label(metric))
        kept = [p for p in points if p[2] and p[2] in existing]
        gone = [p for p in points if p[2] and p[2] not in existing]
        ax.scatter([p[0] for p in kept], [p[1] for p in kept], color="tab:green", zorder=3, label="checkpoint")
        if gone:
            ax.scatter([p[0] for p in gone], [p[1] for p in gone], facecolors="none", edgecolors="tab:gray",
                       zorder=3, label="checkpoint (deleted)")
        mode = infer_mode(metric)
        scored = [p for p in kept if p[1] == p[1]]  # NaN never wins
        if scored:
            best = (max if mode == "max" else min)(scored, key=lambda p: p[1])
            best_names[metric] = best[2]
            ax.scatter([best[0]], [best[1]], marker="*", s=220, color="gold", edgecolors="black", zorder=4,
                       label=f"best checkpoint ({mode})")
        for i, r in enumerate(restarts):
            ax.axvline(where(r), color="tab:red", linestyle="--", linewidth=1, label="restart" if i == 0 else None)
        ax.set_ylabel(_label(metric))
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    bottom = axes[-1, 0]
    bottom.set_xlabel({"index": "report", "step": "step", "time": "time"}[x])
    if x == "time":
        locator = mdates.AutoDateLocator()  # down to seconds for a short run
        bottom.xaxis.set_major_locator(locator)
        bottom.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    else:
        bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(_label(posixpath.basename(path)) + (f" ({len(restarts)} restart(s))" if restarts else ""))
    fig.tight_layout()
    fig.savefig(output, dpi=100)
    plt.close(fig)
    checkpoints = [r["checkpoint"] for r in log if r.get("checkpoint")]
    return {"output": output, "metrics": metrics, "x": x, "reports": len(log),
            "restarts_at": [r["index"] for r in restarts], "checkpoints": len(checkpoints),
            "deleted_checkpoints": [c for c in checkpoints if c not in existing], "best": best_names}
