"""P6: worker-group start for 1, 2, 4, 8, 16 workers (0.1 CPU each, a trivial function), per-worker slope.

    python bench/p6_worker_start.py [--rounds 2] [--sizes 1 2 4 8 16] [--no-raytrain]

Each point is a fresh process; Ray is started first and not counted. Floors: plain Ray actors
(``actors``) and plain Ray actors importing torch (``actors-torch``). Targets (TARGETS.md and
issue 12): a framework-free trainer <= 0.3 s per worker; TorchTrainer <= 1.2x the actors-torch
slope; each <= 1/3 of the slope of Ray Train's same trainer. Where a floor is above a target, the
floor's own ratio is printed next to it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import save  # noqa: E402

JOB = str(Path(__file__).parent / "_p6_job.py")


def start_seconds(mode: str, n: int) -> float:
    with tempfile.TemporaryDirectory(prefix="p6-") as out:
        done = subprocess.run([sys.executable, JOB, mode, str(n), out], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "OMP_NUM_THREADS": "1", "RAY_TRAIN_V2_ENABLED": "1"})
    line = next((line for line in done.stdout.splitlines() if line.startswith("P6_START_S")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"P6 {mode} x{n} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return float(line.split()[1])


def slope(points: dict[int, float]) -> float:
    """Least-squares seconds per added worker."""
    xs, ys = list(points), list(points.values())
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--no-raytrain", action="store_true")
    args = parser.parse_args()
    modes = ["actors", "trainkit", "actors-torch", "trainkit-torch"]
    modes += [] if args.no_raytrain else ["raytrain", "raytrain-torch"]
    samples: dict[str, dict[int, list[float]]] = {m: {n: [] for n in args.sizes} for m in modes}
    for i in range(args.rounds):
        for mode in modes if i % 2 == 0 else reversed(modes):
            if mode.startswith("raytrain") and i > 0:
                continue  # one round: 16 Ray Train workers take a minute
            for n in args.sizes:
                samples[mode][n].append(start_seconds(mode, n))
                print(f"  round {i + 1}/{args.rounds} {mode} x{n}: {samples[mode][n][-1]:.2f}", file=sys.stderr, flush=True)
    medians = {m: {n: statistics.median(s) for n, s in by_n.items()} for m, by_n in samples.items()}
    slopes = {m: slope(points) for m, points in medians.items()}
    print("P6 start seconds (median) by workers: " + "  ".join(f"{n:>6d}" for n in args.sizes) + "   slope s/worker")
    for m in modes:
        print(f"P6 {m:15s}" + " " * 24 + "  ".join(f"{medians[m][n]:6.2f}" for n in args.sizes) + f"   {slopes[m]:.3f}")
    ratios = {"trainkit slope s/worker (target <= 0.3)": slopes["trainkit"],
              "  its floor, the actors slope": slopes["actors"],
              "trainkit-torch/actors-torch slope (target <= 1.2)": slopes["trainkit-torch"] / slopes["actors-torch"]}
    if not args.no_raytrain:
        ratios.update({
            "trainkit/raytrain slope (target <= 0.33)": slopes["trainkit"] / slopes["raytrain"],
            "  its floor, actors/raytrain": slopes["actors"] / slopes["raytrain"],
            "trainkit-torch/raytrain-torch slope (target <= 0.33)": slopes["trainkit-torch"] / slopes["raytrain-torch"],
            "  its floor, actors-torch/raytrain-torch": slopes["actors-torch"] / slopes["raytrain-torch"],
            "raytrain-torch/actors-torch slope": slopes["raytrain-torch"] / slopes["actors-torch"]})
    for name, value in ratios.items():
        print(f"P6 {name:52s} {value:.3f}")
    print(f"results: {save('p6', {'samples': samples, 'medians': medians, 'slopes': slopes, 'ratios': ratios})}")


if __name__ == "__main__":
    main()
