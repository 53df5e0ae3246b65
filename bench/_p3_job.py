"""The P3 job: steady-state DDP throughput of a small CNN, the same loop body under two launchers.

    torchrun --standalone --nproc_per_node=2 bench/_p3_job.py torchrun
    python bench/_p3_job.py trainkit

Each rank trains WARMUP steps, then times STEPS steps; rank 0 prints ``P3_STEPS_PER_S <x>``. Under
trainkit the loop also reports metrics every REPORT_EVERY steps, as a real training loop would.
"""

from __future__ import annotations

import sys
import time

WARMUP, STEPS, REPORT_EVERY, BATCH = 20, 200, 10, 64


def train_loop(report) -> float:
    """Steps per second over STEPS timed steps; ``report(step, loss)`` is called every REPORT_EVERY."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(dist.get_rank())
    model = DistributedDataParallel(nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(BATCH, 1, 16, 16), torch.randint(0, 10, (BATCH,))
    start = 0.0
    for step in range(WARMUP + STEPS):
        if step == WARMUP:
            dist.barrier()
            start = time.perf_counter()
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if step % REPORT_EVERY == 0:
            report(step, loss.item())
    dist.barrier()
    return STEPS / (time.perf_counter() - start)


def torchrun_main() -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rate = train_loop(lambda step, loss: None)
    if dist.get_rank() == 0:
        print(f"P3_STEPS_PER_S {rate:.3f}")
    dist.destroy_process_group()


def trainkit_main() -> None:
    import trainkit
    from trainkit_torch import TorchTrainer

    def fn():
        return train_loop(lambda step, loss: trainkit.report({"step": step, "loss": loss}))

    result = TorchTrainer(fn, scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                          run_config=trainkit.RunConfig(verbose=0, storage_path=sys.argv[2])).fit()
    print(f"P3_STEPS_PER_S {result.return_value:.3f}")


if __name__ == "__main__":
    {"torchrun": torchrun_main, "trainkit": trainkit_main}[sys.argv[1]]()
