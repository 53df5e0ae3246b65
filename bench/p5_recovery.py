"""P5: SIGKILL one worker mid-run -> the restarted attempt's first report: trainkit vs Ray Train.

    python bench/p5_recovery.py [--rounds 3] [--no-raytrain]

Target (TARGETS.md): <= 0.3x Ray Train.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import run_alone, save  # noqa: E402


def body(report, checkpoint_cls, ctx, get_checkpoint, marks: str) -> None:
    """Report a checkpoint every 0.1 s; on attempt 0, rank 1 kills itself after step 3."""
    checkpoint = get_checkpoint()
    resumed, start = checkpoint is not None, 0  # (Ray Train's get_checkpoint() changes as you report)
    if checkpoint:
        with checkpoint.as_directory() as path:
            start = int(open(os.path.join(path, "step")).read()) + 1
            with open(marks, "a") as f:
                f.write(json.dumps({"event": "restarted_first_step", "t": time.time()}) + "\n")
    for step in range(start, 8):
        with tempfile.TemporaryDirectory() as tmp:
            open(os.path.join(tmp, "step"), "w").write(str(step))
            report({"step": step}, checkpoint=checkpoint_cls.from_directory(tmp))
        if checkpoint and ctx.get_world_rank() == 0:
            with open(marks, "a") as f:  # the restarted attempt's first report has returned
                f.write(json.dumps({"event": "first_report", "t": time.time()}) + "\n")
            checkpoint = None
        if step == 3 and not resumed and ctx.get_world_rank() == 1:
            with open(marks, "a") as f:
                f.write(json.dumps({"event": "kill", "t": time.time()}) + "\n")
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.1)


def run_trainkit(storage: str, marks: str) -> None:
    import trainkit

    def fn():
        body(trainkit.report, trainkit.Checkpoint, trainkit.get_context(), trainkit.get_checkpoint, marks)

    trainkit.DataParallelTrainer(fn, scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                                 run_config=trainkit.RunConfig(name="p5", storage_path=storage, verbose=0,
                                                               failure_config=trainkit.FailureConfig(max_failures=1))).fit()


def run_raytrain(storage: str, marks: str) -> None:
    import ray.train
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    def fn():
        body(ray.train.report, ray.train.Checkpoint, ray.train.get_context(), ray.train.get_checkpoint, marks)

    DataParallelTrainer(fn, scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                        run_config=ray.train.RunConfig(name="p5", storage_path=storage,
                                                       failure_config=ray.train.FailureConfig(max_failures=1))).fit()


def one(name: str) -> float:
    storage = tempfile.mkdtemp(prefix=f"p5-{name}-")
    marks = os.path.join(storage, "marks.jsonl")
    run_alone(__file__, "--only", name, storage, marks, timeout=300)
    events = [json.loads(line) for line in open(marks)]
    kill = next(e["t"] for e in events if e["event"] == "kill")
    first = next(e["t"] for e in events if e["event"] == "first_report")
    return first - kill


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-raytrain", action="store_true")
    parser.add_argument("--only", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        {"trainkit": run_trainkit, "raytrain": run_raytrain}[args.only[0]](args.only[1], args.only[2])
        return
    names = ["trainkit"] + ([] if args.no_raytrain else ["raytrain"])
    samples = {n: [] for n in names}
    for i in range(args.rounds):
        for n in names if i % 2 == 0 else reversed(names):
            samples[n].append(one(n))
            print(f"  round {i + 1}/{args.rounds} {n}: {samples[n][-1]:.2f} s", file=sys.stderr, flush=True)
    med = {n: statistics.median(s) for n, s in samples.items()}
    for n, s in samples.items():
        print(f"P5 {n:9s} SIGKILL -> first report of the restarted attempt: median {med[n]:.2f} s (min {min(s):.2f}, max {max(s):.2f})")
    if "raytrain" in med:
        print(f"P5 trainkit/raytrain = {med['trainkit'] / med['raytrain']:.2f} (target <= 0.3)")
    print(f"results: {save('p5', {'samples': samples, 'median': med})}")


if __name__ == "__main__":
    main()
