"""torch.distributed's answers to ``trainkit.testing.BackendConformance``: every plugin whose
workers share torch's process group (trainkit-torch, -lightning, -hf) sets these three."""

from __future__ import annotations

import torch

__all__ = ["all_gather", "framework_rank", "is_initialized"]


def framework_rank() -> int:
    return torch.distributed.get_rank()


def all_gather(value: float) -> list[float]:
    gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(gathered, torch.tensor([value], dtype=torch.float64))
    return [t.item() for t in gathered]


def is_initialized() -> bool:
    return torch.distributed.is_initialized()
