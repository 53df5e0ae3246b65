"""trainkit-torch against trainkit.testing's conformance suites (gloo on 2 CPU workers)."""

import torch

from trainkit.testing import BackendConformance, CheckpointConformance
from trainkit_torch import TorchCheckpointIO, TorchConfig


def framework_rank() -> int:
    return torch.distributed.get_rank()


def all_gather(value: float) -> list[float]:
    gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(gathered, torch.tensor([value], dtype=torch.float64))
    return [t.item() for t in gathered]


def is_initialized() -> bool:
    return torch.distributed.is_initialized()


class TestTorchBackend(BackendConformance):
    backend_config = TorchConfig()
    framework_modules = ("torch",)
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)


class TestTorchCheckpointIO(CheckpointConformance):
    checkpoint_io = TorchCheckpointIO("model.pt")

    def make_state(self):
        return {"weight": torch.arange(6.0).reshape(2, 3), "epoch": 3}

    def assert_same(self, loaded, saved):
        assert torch.equal(loaded["weight"], saved["weight"]) and loaded["epoch"] == saved["epoch"]
