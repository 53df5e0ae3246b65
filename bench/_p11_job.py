"""The P11 job: an unchanged torchrun-style script (gloo DDP, 3 epochs x 10 steps, rank 0 saves
each epoch), run by torchrun and by ``trainkit launch``. It appends what the bench times to
OUT/events.jsonl: "first_line" at its first line of output, "crash" just before rank 1 of the first
attempt exits 1 in epoch 1 (with ``--crash``; the restarted attempt then ends at its first line, as
torch 2.13's torchrun hangs its restarted ranks in ``init_process_group`` here, cause not traced),
"done" at its end.

    torchrun --standalone --nproc-per-node 2 bench/_p11_job.py OUT [--crash]
    trainkit launch --nproc 2 bench/_p11_job.py OUT [--crash]
"""

from __future__ import annotations

import json
import os
import sys
import time

OUT, CRASH = sys.argv[1], "--crash" in sys.argv[2:]
RANK, RESTART = int(os.environ["RANK"]), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def event(name: str) -> None:
    with open(os.path.join(OUT, "events.jsonl"), "a") as f:  # one short append per line: whole lines
        f.write(json.dumps({"name": name, "rank": RANK, "restart": RESTART, "t": time.time()}) + "\n")


print(f"rank {RANK} (restart {RESTART}) starts", flush=True)
event("first_line")
if CRASH and RESTART > 0:
    sys.exit(0)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

dist.init_process_group("gloo")
torch.manual_seed(RANK)
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    if CRASH and RANK == 1 and RESTART == 0 and epoch == 1:
        event("crash")
        sys.exit(1)
    for _ in range(10):
        x, y = torch.randn(16, 32), torch.randn(16, 1)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    if RANK == 0:
        torch.save(model.module.state_dict(), os.path.join(OUT, f"model_{epoch}.pt"))
    dist.barrier()
event("done")
dist.destroy_process_group()
