"""P3: steady-state DDP throughput of a small CNN (fixed steps), trainkit vs the same loop under torchrun.

    python bench/p3_throughput.py [--rounds 5]

Target (TARGETS.md): trainkit >= 0.97x torchrun's steps per second.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import rounds, save, summarize  # noqa: E402

JOB = str(Path(__file__).parent / "_p3_job.py")


def variant(mode: str):
    def run() -> float:
        out = tempfile.mkdtemp(prefix=f"p3-{mode}-")
        cmd = ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", JOB, mode]
               if mode == "torchrun" else [sys.executable, JOB, mode, out])
        try:
            done = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                                  timeout=600)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        found = re.search(r"P3_STEPS_PER_S ([0-9.]+)", done.stdout)
        if done.returncode or not found:
            raise RuntimeError(f"{mode} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        return float(found.group(1))

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    samples = rounds({m: variant(m) for m in ("torchrun", "trainkit")}, args.rounds)
    stats = {m: summarize(s) for m, s in samples.items()}
    for m, s in stats.items():
        print(f"P3 {m:9s} median {s['median']:.1f} steps/s (min {s['min']:.1f}, max {s['max']:.1f}, n={s['n']})")
    ratio = stats["trainkit"]["median"] / stats["torchrun"]["median"]
    print(f"P3 trainkit/torchrun throughput = {ratio:.3f} (target >= 0.97)")
    print(f"results: {save('p3', {'stats': stats, 'ratios': {'trainkit/torchrun': ratio}, 'samples': samples})}")


if __name__ == "__main__":
    main()
