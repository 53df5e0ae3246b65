"""P2: latency of report() without a checkpoint, called in a loop on a worker: trainkit vs Ray Train.

    python bench/p2_report_latency.py [--calls 2000] [--raytrain-calls 5]

Target (TARGETS.md): p50 <= 1 ms, p99 <= 10 ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import run_alone, save  # noqa: E402


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": pick(0.5) * 1e3, "p99_ms": pick(0.99) * 1e3, "max_ms": ordered[-1] * 1e3, "n": len(ordered)}


def loop(report, calls: int) -> list[float]:
    durations = []
    for i in range(calls):
        start = time.perf_counter()
        report({"step": i, "loss": 1.0 / (i + 1)})
        durations.append(time.perf_counter() - start)
    return durations


def run_trainkit(calls: int, storage: str) -> dict[str, float]:
    import trainkit

    result = trainkit.DataParallelTrainer(
        lambda: loop(trainkit.report, calls),
        scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=trainkit.RunConfig(name="p2", storage_path=storage, verbose=0)).fit()
    return percentiles(result.return_value)


def run_raytrain(calls: int, storage: str) -> dict[str, float]:
    import ray.train
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    def fn():
        durations = loop(ray.train.report, calls)
        if ray.train.get_context().get_world_rank() == 0:  # Ray Train 2.x keeps no metrics without checkpoints
            with open(f"{storage}/raytrain-durations.json", "w") as f:
                json.dump(durations, f)

    DataParallelTrainer(fn, scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                                 run_config=ray.train.RunConfig(name="p2ray", storage_path=storage)).fit()
    with open(f"{storage}/raytrain-durations.json") as f:
        return percentiles(json.load(f))


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--raytrain-calls", type=int, default=5)
    parser.add_argument("--no-raytrain", action="store_true")
    parser.add_argument("--only", choices=["trainkit", "raytrain"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    storage = tempfile.mkdtemp(prefix="p2-")
    if args.only:  # one framework per fresh process, so neither inherits the other's Ray
        run = run_trainkit if args.only == "trainkit" else run_raytrain
        print(json.dumps(run(args.calls if args.only == "trainkit" else args.raytrain_calls, storage)))
        return
    stats = {}
    for name in ["trainkit"] + ([] if args.no_raytrain else ["raytrain"]):
        out = run_alone(__file__, "--only", name, "--calls", str(args.calls), "--raytrain-calls", str(args.raytrain_calls))
        stats[name] = json.loads(out.strip().splitlines()[-1])
    for name, s in stats.items():
        print(f"P2 {name:9s} report() p50 {s['p50_ms']:.3f} ms  p99 {s['p99_ms']:.3f} ms  max {s['max_ms']:.1f} ms  (n={s['n']})")
    tk = stats["trainkit"]
    print(f"P2 trainkit p50 {tk['p50_ms']:.3f} ms (target <= 1), p99 {tk['p99_ms']:.3f} ms (target <= 10)")
    if "raytrain" in stats:
        print(f"P2 raytrain/trainkit p50 = {stats['raytrain']['p50_ms'] / tk['p50_ms']:.0f}x")
    print(f"results: {save('p2', {'stats': stats})}")


if __name__ == "__main__":
    main()
