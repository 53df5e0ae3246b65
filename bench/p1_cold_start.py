"""P1: cold start to result of the tiny 2-worker DDP job, whole process: trainkit vs torchrun vs Ray Train.

    python bench/p1_cold_start.py [--rounds 3] [--no-raytrain]

Target (TARGETS.md): trainkit <= 1.3x torchrun and <= 0.3x Ray Train.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import rounds, save, summarize, timed  # noqa: E402

JOB = str(Path(__file__).parent / "_p1_job.py")


def variant(mode: str):
    def run() -> float:
        out = tempfile.mkdtemp(prefix=f"p1-{mode}-")
        try:
            if mode == "torchrun":
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", JOB, mode, out]
            else:
                cmd = [sys.executable, JOB, mode, out]
            return timed(cmd, env={"OMP_NUM_THREADS": "1", "RAY_TRAIN_V2_ENABLED": "1"})
        finally:
            shutil.rmtree(out, ignore_errors=True)

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-raytrain", action="store_true")
    args = parser.parse_args()
    modes = ["torchrun", "trainkit"] + ([] if args.no_raytrain else ["raytrain"])
    samples = rounds({m: variant(m) for m in modes}, args.rounds)
    stats = {m: summarize(s) for m, s in samples.items()}
    tk, tr = stats["trainkit"]["median"], stats["torchrun"]["median"]
    for m, s in stats.items():
        print(f"P1 {m:9s} median {s['median']:.2f} s (min {s['min']:.2f}, max {s['max']:.2f}, n={s['n']})")
    print(f"P1 trainkit/torchrun = {tk / tr:.2f} (target <= 1.3)")
    ratios = {"trainkit/torchrun": tk / tr}
    if "raytrain" in stats:
        ratios["trainkit/raytrain"] = tk / stats["raytrain"]["median"]
        print(f"P1 trainkit/raytrain = {ratios['trainkit/raytrain']:.2f} (target <= 0.3)")
    print(f"results: {save('p1', {'stats': stats, 'ratios': ratios, 'samples': samples})}")


if __name__ == "__main__":
    main()
