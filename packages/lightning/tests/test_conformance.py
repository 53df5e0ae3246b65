"""trainkit-lightning against trainkit.testing's backend conformance suite (gloo on 2 CPU workers)."""

import torch

from trainkit.testing import BackendConformance
from trainkit_lightning import LightningConfig


def framework_rank() -> int:  # the process group Lightning's strategies run on
    return torch.distributed.get_rank()


def all_gather(value: float) -> list[float]:
    gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(gathered, torch.tensor([value], dtype=torch.float64))
    return [t.item() for t in gathered]


def is_initialized() -> bool:
    return torch.distributed.is_initialized()


class TestLightningBackend(BackendConformance):
    backend_config = LightningConfig()
    framework_modules = ("torch", "lightning", "pytorch_lightning")
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
