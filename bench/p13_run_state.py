"""P13: run_state.json's size and the time of its write at each checkpoint commit, with
10,000-key reports (each with a checkpoint, every one kept), in local mode on a local disk.

    python bench/p13_run_state.py [--reports 40] [--keys 10000]
    PYTHONPATH=<an older checkout>/packages/core/src python bench/p13_run_state.py --no-save   # "before"

Each commit writes run_state.json once (``RunState.save``, timed here); its size after the last
commit is the figure that grew with every kept checkpoint's metrics before format 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import trainkit
from _common import save
from trainkit._internal.storage import run_state


def train_fn(config):
    metrics = {f"metric_{i:05d}": float(i) for i in range(config["keys"])}
    for step in range(config["reports"]):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "step"), "w") as f:
                f.write(str(step))
            trainkit.report({**metrics, "step": step}, checkpoint=trainkit.Checkpoint.from_directory(tmp))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=40)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--no-save", action="store_true", help="print only (e.g. for an older checkout)")
    args = parser.parse_args()
    saves: list[float] = []
    original = run_state.RunState.save

    def timed_save(self, storage):
        begin = time.perf_counter()
        original(self, storage)
        saves.append(time.perf_counter() - begin)

    run_state.RunState.save = timed_save
    with tempfile.TemporaryDirectory() as root:
        begin = time.perf_counter()
        trainkit.DataParallelTrainer(
            train_fn, train_loop_config={"reports": args.reports, "keys": args.keys},
            scaling_config=trainkit.ScalingConfig(num_workers=0),
            run_config=trainkit.RunConfig(name="p13", storage_path=root, verbose=0)).fit()
        wall = time.perf_counter() - begin
        size = os.path.getsize(os.path.join(root, "p13", "run_state.json"))
    late = saves[-10:]
    figure = {"reports": args.reports, "keys": args.keys, "run_state_bytes": size,
              "state_write_ms_median_last_10": round(statistics.median(late) * 1000, 2),
              "state_write_ms_max": round(max(saves) * 1000, 2), "state_writes": len(saves),
              "fit_s": round(wall, 2), "trainkit_from": os.path.dirname(trainkit.__file__)}
    print(f"P13 {args.reports} reports x {args.keys} keys, every checkpoint kept: run_state.json "
          f"{size / 1024:.1f} KiB; its write at a commit {figure['state_write_ms_median_last_10']} ms "
          f"(median of the last 10; max {figure['state_write_ms_max']} ms); fit {wall:.1f} s")
    print(json.dumps(figure))
    if not args.no_save:
        save("p13_run_state", figure)


if __name__ == "__main__":
    main()
