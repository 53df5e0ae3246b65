"""The P6 job: start a group of N workers running a trivial function, one way per process.

    python bench/_p6_job.py MODE N OUT

Modes: ``actors`` (plain Ray actors, the floor of a framework-free trainer), ``actors-torch`` (plain
Ray actors that import torch, the floor of a TorchTrainer), ``trainkit`` (DataParallelTrainer),
``trainkit-torch`` (TorchTrainer), ``raytrain`` and ``raytrain-torch`` (Ray Train's
DataParallelTrainer and TorchTrainer). Ray is started
first and not counted; the job prints ``P6_START_S <seconds>`` from then until every worker is done.
"""

from __future__ import annotations

import sys
import time

CPU_PER_WORKER = 0.1  # fractional, so 16 workers fit on a 2-core machine


def plain_actors(n: int, imports: tuple[str, ...]) -> None:
    import ray

    @ray.remote(num_cpus=CPU_PER_WORKER)
    class Plain:
        def ready(self) -> bool:
            for name in imports:
                __import__(name)
            return True

    actors = [Plain.remote() for _ in range(n)]
    ray.get([a.ready.remote() for a in actors])


def trainkit_trainer(n: int, out: str, torch: bool) -> None:
    import trainkit

    def fn():
        trainkit.report({"rank": trainkit.get_context().get_world_rank()})

    if torch:
        from trainkit_torch import TorchTrainer as cls
    else:
        cls = trainkit.DataParallelTrainer
    cls(fn, scaling_config=trainkit.ScalingConfig(num_workers=n, resources_per_worker={"CPU": CPU_PER_WORKER}),
        run_config=trainkit.RunConfig(name="p6", storage_path=out, verbose=0)).fit()


def raytrain_trainer(n: int, out: str, torch: bool) -> None:
    import ray.train

    def fn():
        ray.train.report({"rank": ray.train.get_context().get_world_rank()})

    if torch:
        from ray.train.torch import TorchTrainer as cls
    else:
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer as cls
    cls(fn, scaling_config=ray.train.ScalingConfig(num_workers=n, resources_per_worker={"CPU": CPU_PER_WORKER}),
        run_config=ray.train.RunConfig(name="p6", storage_path=out)).fit()


def main(mode: str, n: int, out: str) -> None:
    if mode.startswith("raytrain"):
        import ray

        ray.init(logging_level="ERROR")
    else:
        from trainkit._internal.cluster.ray_runtime import ensure_ray

        ensure_ray()
    start = time.perf_counter()
    {
        "actors": lambda: plain_actors(n, ()),
        "actors-torch": lambda: plain_actors(n, ("torch",)),
        "trainkit": lambda: trainkit_trainer(n, out, torch=False),
        "trainkit-torch": lambda: trainkit_trainer(n, out, torch=True),
        "raytrain": lambda: raytrain_trainer(n, out, torch=False),
        "raytrain-torch": lambda: raytrain_trainer(n, out, torch=True),
    }[mode]()
    print(f"P6_START_S {time.perf_counter() - start:.4f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
