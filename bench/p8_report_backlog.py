"""P8: the driver under a report backlog: 2 workers each call ``report()`` N times as fast as they
can (no checkpoints), so the driver falls behind; its peak RSS at 1k and at 100k reports, the
wall time, and the size of ``run_state.json`` at the end.

    python bench/p8_report_backlog.py [--reports 100000]

Target (issue 20): the driver's memory stays bounded (100k reports within a few MiB of 1k) and
``run_state.json`` stays small (the metrics history is in ``metrics.jsonl`` only).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import peak_memory, save  # noqa: E402


def run(reports: int, storage: str) -> None:
    import trainkit

    def flood():
        for i in range(reports):
            trainkit.report({"step": i, "loss": 1.0 / (i + 1)})

    trainkit.DataParallelTrainer(
        flood, scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=trainkit.RunConfig(name="p8", storage_path=storage, verbose=0)).fit()


def measure(reports: int) -> dict:
    storage = tempfile.mkdtemp(prefix="p8-")
    begin = time.perf_counter()
    memory = peak_memory([sys.executable, __file__, "--only", str(reports), storage],
                         role=lambda cmdline, is_root: "driver" if is_root else "other")
    run_path = os.path.join(storage, "p8")
    with open(os.path.join(run_path, "metrics.jsonl")) as f:
        lines = sum(1 for _ in f)
    return {"reports": reports, "wall_s": round(time.perf_counter() - begin, 1),
            "driver_peak_rss_mib": memory["peak_rss_mib"]["driver"][0], "metrics_lines": lines,
            "run_state_bytes": os.path.getsize(os.path.join(run_path, "run_state.json"))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=100_000)
    parser.add_argument("--only", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        run(int(args.only[0]), args.only[1])
        return
    stats = [measure(1000), measure(args.reports)]
    for s in stats:
        print(f"P8 {s['reports']:>7d} reports x 2 ranks: driver peak RSS {s['driver_peak_rss_mib']:.0f} MiB, "
              f"{s['wall_s']:.1f} s, run_state.json {s['run_state_bytes']} bytes, {s['metrics_lines']} metrics lines")
    print(f"P8 driver growth from {stats[0]['reports']} to {stats[1]['reports']} reports: "
          f"{stats[1]['driver_peak_rss_mib'] - stats[0]['driver_peak_rss_mib']:+.0f} MiB")
    print(f"results: {save('p8', {'stats': stats})}")


if __name__ == "__main__":
    main()
