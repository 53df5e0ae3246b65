"""P10: the driver's control plane at scale, by simulation (no Ray): a real ``Controller`` on a
temporary local storage directory, its worker group left out, fed the ``Report`` events N ranks
send (what ``_watch`` hands to ``_on_report`` after each poll). Per N, in a fresh process:

- reports/s: metrics-only reports, every rank reporting each index (consolidation, metrics log,
  ``run_state.json`` at most once a second, hooks and callbacks);
- commit latency: a checkpoint with one small shard per rank (written into the report's temporary
  directory and hashed as ``report()`` does on a local disk): from the last rank's report reaching
  the driver to its ``_on_report`` returning (manifest, rename, ``run_state.json`` fsynced);
- driver memory: tracemalloc peak of one checkpoint round (its N reports held, then committed), and
  the process's RSS high-water mark over the run minus its RSS once set up.

    python bench/p10_control_plane.py [--ranks 64 256 1024 4096] [--profile 4096]

Not simulated: Ray itself (one ``poll`` RPC per rank per batch of events, unpickling, ``ray.wait``).
Target (issue 23): every figure grows at most linearly with N.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import RESULTS, save  # noqa: E402

SHARD_BYTES = 4096
REPORTS_PER_CASE = 65_536  # metrics-only reports per pass (indices = this / N, at least 16)
METRICS_PASSES = 3  # the median pass counts
CHECKPOINTS = 7


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def controller(storage: str, n: int):
    """The driver as ``fit()`` builds it, up to the point where the worker group would start."""
    import trainkit
    from trainkit._internal.driver.controller import Controller

    c = Controller(train_fn=lambda: None, train_loop_config=None, backend_config=trainkit.BackendConfig(),
                   scaling_config=trainkit.ScalingConfig(num_workers=n),
                   run_config=trainkit.RunConfig(name=f"p10-{n}", storage_path=storage, verbose=0),
                   datasets=None, default_name="p10")
    c.storage.preflight()
    c._prepare_state()
    c.reports.world_size = n
    c.state.world_sizes.append(n)
    return c


def drain_acks(c, n: int) -> None:
    """What the driver sends each rank after a commit."""
    assert len(c.reports.take_acks()) in (0, n)


def metrics_round(c, n: int, index: int) -> None:
    from trainkit._internal.worker.events import Report

    for rank in range(n):
        c.reports.on_report(Report(rank, index, {"step": index, "loss": 1.0 / (index + 1), "lr": 1e-3}))


def write_shards(c, n: int, index: int) -> list:
    """Each rank's report of checkpoint ``index``: its shard in the temporary directory, hashed."""
    from trainkit._internal.storage.checkpoint_files import FileEntry
    from trainkit._internal.worker.events import Report

    name = f"checkpoint_{index:06d}"
    tmp = c.storage.tmp_checkpoint_path(name, c.state.attempt, index)
    os.makedirs(tmp, exist_ok=True)
    reports = []
    for rank in range(n):
        rel, data = f"shard_{rank:05d}.pt", os.urandom(SHARD_BYTES)
        with open(os.path.join(tmp, rel), "wb") as f:
            f.write(data)
        # The entry checkpoint_files.hash_local makes on the worker (hashed here from memory: its 8 MiB read
        # buffer would otherwise set the driver's RSS high-water mark).
        entry = FileEntry(rel, len(data), hashlib.sha256(data).hexdigest())
        reports.append(Report(rank, index, {"step": index, "loss": 0.5}, name, tmp, [entry]))
    return reports


def checkpoint_round(c, reports: list, profiler=None) -> tuple[float, float]:
    """Feed one checkpoint's reports; (wall, CPU) seconds from the last one's arrival to its commit
    (the difference is mostly waiting for fsync)."""
    profiler and profiler.enable()
    for r in reports[:-1]:
        c.reports.on_report(r)
    begin, begin_cpu = time.perf_counter(), time.process_time()
    c.reports.on_report(reports[-1])
    elapsed, cpu = time.perf_counter() - begin, time.process_time() - begin_cpu
    profiler and profiler.disable()
    assert c.state.latest_checkpoint == reports[-1].checkpoint_name
    drain_acks(c, len(reports))
    return elapsed, cpu


def case(n: int, storage: str, profiler=None) -> dict:
    """One N; ``profiler`` (a cProfile.Profile) runs only while the driver's code does."""
    c = controller(storage, n)
    rss_setup = _kib("VmRSS")
    per_pass = max(16, REPORTS_PER_CASE // n)
    passes = []
    for first in range(0, METRICS_PASSES * per_pass, per_pass):
        profiler and profiler.enable()
        begin = time.perf_counter()
        for index in range(first, first + per_pass):
            metrics_round(c, n, index)
        passes.append(time.perf_counter() - begin)
        profiler and profiler.disable()
    indices = METRICS_PASSES * per_pass
    assert c.state.next_report_index == indices
    metrics_s = sorted(passes)[len(passes) // 2]
    latencies, cpu = [], []
    for k in range(CHECKPOINTS):
        wall_s, cpu_s = checkpoint_round(c, write_shards(c, n, indices + k), profiler)
        latencies.append(wall_s)
        cpu.append(cpu_s)
    tracemalloc.start()  # the reports count: the driver holds them (unpickled) until the commit
    base = tracemalloc.get_traced_memory()[0]
    checkpoint_round(c, write_shards(c, n, indices + CHECKPOINTS))
    traced_peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    manifest = os.path.join(c.storage.path(c.state.latest_checkpoint), ".manifest.json")
    latencies.sort()
    cpu.sort()
    return {"ranks": n, "metrics_reports_per_pass": n * per_pass, "metrics_pass_s": [round(x, 4) for x in passes],
            "reports_per_s": round(n * per_pass / metrics_s), "consolidations_per_s": round(per_pass / metrics_s, 1),
            "commit_ms": [round(x * 1000, 2) for x in latencies], "commit_ms_median": round(latencies[len(latencies) // 2] * 1000, 2),
            "commit_cpu_ms_median": round(cpu[len(cpu) // 2] * 1000, 2),
            "checkpoint_round_traced_peak_kib": round(traced_peak / 1024, 1),
            "traced_bytes_per_rank": round(traced_peak / n), "rss_growth_kib": _kib("VmHWM") - rss_setup, "manifest_bytes": os.path.getsize(manifest)}


def profile(n: int, storage: str) -> str:
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    case(n, storage, profiler)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
    return out.getvalue()


def per_doubling(values: list[float], ranks: list[int]) -> list[float]:
    """The growth of each step, as a factor per doubling of the ranks (<= 2: at most linear)."""
    return [round((values[i] / values[i - 1]) ** (1 / math.log2(ranks[i] / ranks[i - 1])), 2)
            for i in range(1, len(values))]


def exponent(values: list[float], ranks: list[int]) -> float:
    """Least-squares slope of log(value) over log(ranks): 1 is linear, 0 flat."""
    xs, ys = [math.log(n) for n in ranks], [math.log(v) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return round(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs), 2)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = [r["ranks"] for r in rows]
    panels = [("reports/s, metrics only (flat = linear total cost)", {"reports/s": [r["reports_per_s"] for r in rows]}),
              ("commit latency, ms (1 shard per rank)", {"wall": [r["commit_ms_median"] for r in rows],
                                                         "CPU": [r["commit_cpu_ms_median"] for r in rows]}),
              ("driver memory of a checkpoint round, MiB", {
                  "tracemalloc peak": [r["checkpoint_round_traced_peak_kib"] / 1024 for r in rows],
                  "RSS high-water growth": [max(r["rss_growth_kib"], 1) / 1024 for r in rows]})]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for i, (ax, (title, series)) in enumerate(zip(axes, panels)):
        for label, values in series.items():
            ax.plot(ranks, values, "o-", label=label)
        if i == 0:
            ax.set_ylim(0, max(series["reports/s"]) * 1.2)
        else:
            last = list(series.values())[0]
            ax.plot(ranks, [last[-1] * n / ranks[-1] for n in ranks], "--", color="grey", label="linear (through N=4096)")
            ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("simulated ranks")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("P10: the driver's control plane, simulated ranks (no Ray)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024, 4096])
    parser.add_argument("--profile", type=int, default=4096, help="cProfile this case (0: none)")
    parser.add_argument("--only", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        what, n, storage = args.only
        print(profile(int(n), storage) if what == "profile" else json.dumps(case(int(n), storage)))
        return
    rows = []
    for n in args.ranks:
        with tempfile.TemporaryDirectory(prefix="p10-") as storage:
            out = subprocess.run([sys.executable, __file__, "--only", "case", str(n), storage],
                                 capture_output=True, text=True, check=True, timeout=600)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"P10 {n:>5d} ranks: {r['reports_per_s']:>8,d} reports/s ({r['consolidations_per_s']} indices/s), "
              f"commit {r['commit_ms_median']:.1f} ms (min {r['commit_ms'][0]:.1f}, max {r['commit_ms'][-1]:.1f}; "
              f"CPU {r['commit_cpu_ms_median']:.1f} ms), "
              f"checkpoint round {r['checkpoint_round_traced_peak_kib'] / 1024:.2f} MiB traced "
              f"({r['traced_bytes_per_rank']} B per rank), "
              f"RSS +{r['rss_growth_kib'] / 1024:.1f} MiB, manifest {r['manifest_bytes']:,d} bytes", flush=True)
    ranks = [r["ranks"] for r in rows]
    series = {"reports_per_s": [r["reports_per_s"] for r in rows],
              "commit_ms": [r["commit_ms_median"] for r in rows],
              "commit_cpu_ms": [max(r["commit_cpu_ms_median"], 0.01) for r in rows],
              "traced_peak": [r["checkpoint_round_traced_peak_kib"] for r in rows],
              "rss_growth": [max(r["rss_growth_kib"], 1) for r in rows]}
    growth = {key: {"per_doubling": per_doubling(v, ranks), "exponent": exponent(v, ranks)} for key, v in series.items()}
    for key, g in growth.items():
        print(f"P10 growth of {key} per doubling of ranks: {g['per_doubling']}, log-log exponent {g['exponent']} "
              "(at most linear: <= 2 per doubling, exponent <= 1)")
    top = None
    if args.profile:
        with tempfile.TemporaryDirectory(prefix="p10-") as storage:
            top = subprocess.run([sys.executable, __file__, "--only", "profile", str(args.profile), storage],
                                 capture_output=True, text=True, check=True, timeout=600).stdout
        print(f"P10 cProfile of the {args.profile}-rank case (by own time):\n{top}")
    RESULTS.mkdir(exist_ok=True)
    figure = RESULTS / f"{time.strftime('%Y-%m-%d')}-p10_control_plane.png"
    plot(rows, figure)
    print(f"P10 plot: {figure}")
    print(f"P10 results: {save('p10_control_plane', {'cases': rows, 'growth_per_doubling': growth, 'profile': top})}")


if __name__ == "__main__":
    main()
