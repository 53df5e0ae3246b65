"""P12: fits 1..N of the P1 job in one driver (a notebook, an HPO loop), seconds per fit: trainkit
with its warm workers, trainkit with them off (``TRAINKIT_SPARE_WORKERS=0``) and Ray Train, each in
one driver, against torchrun's cold start of the same job (a new process each time, as torchrun
has no other way); then each side's whole-tree memory over 3 fits.

    python bench/p12_warm_fits.py [--fits 20] [--torchrun-runs 5] [--raytrain-fits 5] [--no-raytrain]
                                  [--pause 5]

Target (issue 31): a warm fit (2..N) <= 0.5x torchrun's cold start. "trainkit" fits back to back (a
search loop); "trainkit paused" waits ``--pause`` s between fits, not counted (a notebook).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import peak_memory, save, summarize, timed  # noqa: E402
from p1_cold_start import ENV, command, role  # noqa: E402

JOB = str(Path(__file__).parent / "_p12_job.py")
SIDES = {"trainkit": ("trainkit", {}), "trainkit paused": ("trainkit", {}),
         "trainkit cold": ("trainkit", {"TRAINKIT_SPARE_WORKERS": "0"}),
         "trainkit unforked": ("trainkit", {"TRAINKIT_FORK_WORKERS": "0"}), "raytrain": ("raytrain", {})}


def fits_in_one_driver(side: str, fits: int, pause: float) -> list[float]:
    mode, env = SIDES[side]
    out = tempfile.mkdtemp(prefix="p12-")
    try:
        timed([sys.executable, JOB, mode, out, str(fits), str(pause if side == "trainkit paused" else 0)],
              env={**ENV, **env}, timeout=3600)
        return json.loads(Path(out, "fits.json").read_text())
    finally:
        shutil.rmtree(out, ignore_errors=True)


def torchrun_cold(runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        out = tempfile.mkdtemp(prefix="p12-torchrun-")
        try:
            samples.append(timed(command("torchrun", out), env=ENV))
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return samples


def memory(side: str) -> dict:
    mode, env = SIDES[side]
    out = tempfile.mkdtemp(prefix="p12-mem-")
    try:
        return peak_memory([sys.executable, JOB, mode, out, "3"], role, env={**ENV, **env}, timeout=1800)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fits", type=int, default=20)
    parser.add_argument("--torchrun-runs", type=int, default=5)
    parser.add_argument("--raytrain-fits", type=int, default=5, help="Ray Train's fits take ~25 s each")
    parser.add_argument("--no-raytrain", action="store_true")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between the paused side's fits")
    args = parser.parse_args()
    sides = [s for s in SIDES if not (args.no_raytrain and s == "raytrain")]
    torchrun = summarize(torchrun_cold(args.torchrun_runs))
    print(f"P12 torchrun cold start: median {torchrun['median']:.2f} s (min {torchrun['min']:.2f}, "
          f"max {torchrun['max']:.2f}, n={torchrun['n']})")
    per_fit, ratios = {}, {}
    for side in sides:
        per_fit[side] = seconds = fits_in_one_driver(side, args.raytrain_fits if side == "raytrain" else args.fits,
                                                     args.pause)
        later = statistics.median(seconds[1:])
        ratios[side] = later / torchrun["median"]
        print(f"P12 {side:15s} fit 1 {seconds[0]:.2f} s, fits 2..{len(seconds)} median {later:.2f} s "
              f"(min {min(seconds[1:]):.2f}, max {max(seconds[1:]):.2f}): {ratios[side]:.2f}x torchrun's cold start"
              + (" (target <= 0.5)" if side == "trainkit" else ""))
        print(f"    per fit: {' '.join(f'{s:.2f}' for s in seconds)}")
    mem = {} if args.no_memory else {side: memory(side) for side in sides if side != "trainkit paused"}
    for side, found in mem.items():
        rss = found["peak_rss_mib"]
        print(f"P12 memory {side:15s} (3 fits) whole tree peak PSS {found['peak_total_pss_mib']:.0f} MiB; driver "
              f"{rss['driver'][0]:.0f} MiB, workers {rss.get('worker', [])} MiB peak RSS")
    print(f"results: {save('p12_warm_fits', {'torchrun': torchrun, 'per_fit': per_fit, 'ratios': ratios, 'memory': mem})}")


if __name__ == "__main__":
    main()
