"""The P12 job: the P1 job's training fitted FITS times in one driver (a notebook, an HPO loop).

    python bench/_p12_job.py trainkit|raytrain OUT FITS [PAUSE]    # writes OUT/fits.json: seconds per fit

PAUSE: seconds the driver waits between fits, not counted (a notebook's user reading a result).
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from _p1_job import _report_fn, train_loop  # noqa: E402


def trainkit_fit(out: str, index: int) -> None:
    import trainkit
    from trainkit_torch import TorchTrainer

    def fn():
        rank = lambda: trainkit.get_context().get_world_rank()  # noqa: E731
        train_loop(rank(), _report_fn(trainkit.report, trainkit.Checkpoint, rank))

    TorchTrainer(fn, scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                 run_config=trainkit.RunConfig(name=f"fit{index}", storage_path=out, verbose=0)).fit()


def raytrain_fit(out: str, index: int) -> None:
    import ray.train
    from ray.train.torch import TorchTrainer

    def fn():
        rank = lambda: ray.train.get_context().get_world_rank()  # noqa: E731
        train_loop(rank(), _report_fn(ray.train.report, ray.train.Checkpoint, rank))

    TorchTrainer(fn, scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                 run_config=ray.train.RunConfig(name=f"fit{index}", storage_path=out)).fit()


if __name__ == "__main__":
    mode, out, fits = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    fit = {"trainkit": trainkit_fit, "raytrain": raytrain_fit}[mode]
    seconds = []
    for index in range(fits):
        if index:
            time.sleep(pause)
        start = time.perf_counter()
        fit(out, index)
        seconds.append(time.perf_counter() - start)
    with open(os.path.join(out, "fits.json"), "w") as f:
        json.dump(seconds, f)
