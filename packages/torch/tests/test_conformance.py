"""trainkit-torch against trainkit.testing's conformance suites (gloo on 2 CPU workers)."""

import torch

from trainkit.testing import BackendConformance, CheckpointConformance
from trainkit_torch import TorchCheckpointIO, TorchConfig
from trainkit_torch.testing import all_gather, framework_rank, is_initialized


class TestTorchBackend(BackendConformance):
    backend_config = TorchConfig()
    framework_modules = ("torch",)
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)


class TestTorchCheckpointIO(CheckpointConformance):
    checkpoint_io = TorchCheckpointIO("model.pt")

    def make_state(self, seed):
        return {"weight": torch.arange(6.0).reshape(2, 3) + seed, "epoch": 3}

    def assert_same(self, loaded, saved):
        assert torch.equal(loaded["weight"], saved["weight"]) and loaded["epoch"] == saved["epoch"]
