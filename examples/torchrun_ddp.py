"""A typical torchrun script, unchanged: `torchrun --nproc-per-node 2 torchrun_ddp.py --epochs 3` or
`trainkit launch --nproc 2 --max-failures 1 torchrun_ddp.py --epochs 3`.

With --crash-once MARKER, rank 1 exits with status 1 in epoch 1 unless MARKER exists (it creates it
first), to show a restart: the next attempt resumes from the checkpoint saved at the end of epoch 0.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default="ddp_out")
    parser.add_argument("--crash-once", metavar="MARKER")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "model.pt")
    start = 0
    if os.path.exists(path):  # a restart resumes from the last epoch rank 0 saved
        saved = torch.load(path)
        model.module.load_state_dict(saved["model"])
        start = saved["epoch"] + 1
        print(f"rank {rank}: resumed at epoch {start}")

    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 4, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    for epoch in range(start, args.epochs):
        if args.crash_once and rank == 1 and epoch == 1 and not os.path.exists(args.crash_once):
            open(args.crash_once, "w").close()
            print("rank 1: crashing", file=sys.stderr)
            sys.exit(1)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"rank {rank}/{world_size} local_rank {local_rank} epoch {epoch} loss {loss.item():.4f}")
        if rank == 0:
            torch.save({"model": model.module.state_dict(), "epoch": epoch}, path)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
