"""trainkit-lightning against trainkit.testing's backend conformance suite (gloo on 2 CPU workers)."""

import torch

from trainkit.testing import BackendConformance
from trainkit_lightning import LightningConfig


def all_reduce_sum(value: float) -> float:
    tensor = torch.tensor([value], dtype=torch.float64)
    torch.distributed.all_reduce(tensor)  # the process group Lightning's strategies run on
    return tensor.item()


class TestLightningBackend(BackendConformance):
    backend_config = LightningConfig()
    framework_modules = ("torch", "lightning", "pytorch_lightning")
    all_reduce_sum = staticmethod(all_reduce_sum)
