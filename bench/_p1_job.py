"""The P1 job: a tiny 2-process DDP run (3 epochs, 3 small checkpoints), launched three ways.

Written as users write it: ``import torch`` at the top, so every launcher's driver imports torch
before anything else (trainkit's driver then imports trainkit and trainkit_torch).

    torchrun --standalone --nproc_per_node=2 bench/_p1_job.py torchrun OUT
    python bench/_p1_job.py trainkit OUT
    python bench/_p1_job.py raytrain OUT
"""

from __future__ import annotations

import time

STARTED = time.time()  # the job's first line: the interpreter itself started before this

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402

TORCH_IMPORTED = time.time()

EPOCHS, STEPS = 3, 10


def train_loop(rank: int, save) -> float:
    """The same loop body under every launcher; ``save(epoch, state, loss)`` stores a checkpoint."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(rank)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = torch.tensor(0.0)
    for epoch in range(EPOCHS):
        for _ in range(STEPS):
            x, y = torch.randn(16, 32), torch.randn(16, 1)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        save(epoch, model.module.state_dict(), loss.item())
    return loss.item()


def torchrun_main(out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def save(epoch, state, loss):
        if rank == 0:
            path = os.path.join(out, f"checkpoint_{epoch:06d}")
            os.makedirs(path, exist_ok=True)
            torch.save(state, os.path.join(path, "model.pt"))
        dist.barrier()

    train_loop(rank, save)
    dist.destroy_process_group()


def _report_fn(report, checkpoint_cls, rank_fn):
    def save(epoch, state, loss):
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if rank_fn() == 0:
                torch.save(state, os.path.join(tmp, "model.pt"))
                checkpoint = checkpoint_cls.from_directory(tmp)
            report({"epoch": epoch, "loss": loss}, checkpoint=checkpoint)

    return save


def trainkit_main(out: str) -> None:
    """Also writes OUT/profile.json: wall-clock marks and the run's start profile."""
    import trainkit
    from trainkit_torch import TorchTrainer

    imported = time.time()

    def fn():
        save = _report_fn(trainkit.report, trainkit.Checkpoint, lambda: trainkit.get_context().get_world_rank())
        train_loop(trainkit.get_context().get_world_rank(), save)

    TorchTrainer(fn, scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                 run_config=trainkit.RunConfig(name="p1", storage_path=out, verbose=0)).fit()
    with open(os.path.join(out, "p1", "run_state.json")) as f:
        start_profile = json.load(f)["start_profile"]
    with open(os.path.join(out, "profile.json"), "w") as f:
        json.dump({"started": STARTED, "torch_imported": TORCH_IMPORTED, "imported": imported, "fitted": time.time(), "start_profile": start_profile}, f)


def raytrain_main(out: str) -> None:
    import ray.train
    from ray.train.torch import TorchTrainer

    def fn():
        save = _report_fn(ray.train.report, ray.train.Checkpoint, lambda: ray.train.get_context().get_world_rank())
        train_loop(ray.train.get_context().get_world_rank(), save)

    TorchTrainer(fn, scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                 run_config=ray.train.RunConfig(name="p1", storage_path=out)).fit()


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    {"torchrun": torchrun_main, "trainkit": trainkit_main, "raytrain": raytrain_main}[mode](out)
