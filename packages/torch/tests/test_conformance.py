"""trainkit-torch against trainkit.testing's conformance suites (gloo on 2 CPU workers)."""

import torch

from trainkit.testing import NOT_PROVIDED, BackendConformance, CheckpointConformance
from trainkit_torch import TorchCheckpointIO, TorchConfig, load_checkpoint
from trainkit_torch.testing import all_gather, framework_rank, is_initialized


def shard(rows: list) -> list:
    """The rows prepare_data_loader's DistributedSampler gives this rank (no shuffling: the order is the kit's)."""
    from torch.utils.data import DataLoader

    from trainkit_torch import prepare_data_loader

    loader = prepare_data_loader(DataLoader(rows, batch_size=1, shuffle=False), move_to_device=False)
    return [int(batch) for batch in loader]


class TestTorchBackend(BackendConformance):
    backend_config = TorchConfig()
    framework_modules = ("torch",)
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
    shard = staticmethod(shard)
    report_callback = NOT_PROVIDED("trainkit-torch has no report callback: a torch loop calls trainkit.report itself")


class TestTorchCheckpointIO(CheckpointConformance):
    checkpoint_io = TorchCheckpointIO("model.pt")
    resume = staticmethod(load_checkpoint)  # the resume helper: the state in the checkpoint given

    def make_state(self, seed):
        return {"weight": torch.arange(6.0).reshape(2, 3) + seed, "epoch": 3}

    def assert_same(self, loaded, saved):
        assert torch.equal(loaded["weight"], saved["weight"]) and loaded["epoch"] == saved["epoch"]
