"""trainkit-torch against trainkit.testing's conformance suites (gloo on 2 CPU workers)."""

import torch

from trainkit.testing import BackendConformance, CheckpointConformance
from trainkit_torch import TorchCheckpointIO, TorchConfig


def all_reduce_sum(value: float) -> float:
    tensor = torch.tensor([value], dtype=torch.float64)
    torch.distributed.all_reduce(tensor)
    return tensor.item()


class TestTorchBackend(BackendConformance):
    backend_config = TorchConfig()
    framework_modules = ("torch",)
    all_reduce_sum = staticmethod(all_reduce_sum)


class TestTorchCheckpointIO(CheckpointConformance):
    checkpoint_io = TorchCheckpointIO("model.pt")

    def make_state(self):
        return {"weight": torch.arange(6.0).reshape(2, 3), "epoch": 3}

    def assert_same(self, loaded, saved):
        assert torch.equal(loaded["weight"], saved["weight"]) and loaded["epoch"] == saved["epoch"]
