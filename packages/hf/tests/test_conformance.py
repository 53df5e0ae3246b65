"""trainkit-hf against trainkit.testing's backend conformance suite (gloo on 2 CPU workers)."""

import torch

from trainkit.testing import BackendConformance
from trainkit_hf import HFConfig


def all_reduce_sum(value: float) -> float:
    tensor = torch.tensor([value], dtype=torch.float64)
    torch.distributed.all_reduce(tensor)  # the process group Transformers, Accelerate and DeepSpeed join
    return tensor.item()


class TestHFBackend(BackendConformance):
    backend_config = HFConfig()
    framework_modules = ("torch", "transformers", "accelerate", "deepspeed", "datasets")
    all_reduce_sum = staticmethod(all_reduce_sum)
