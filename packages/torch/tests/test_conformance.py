"""trainkit-torch against trainkit.testing's conformance suites (gloo on 2 CPU workers)."""

import pytest
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


def journey(config: dict) -> None:
    """A user's run: a linear model under DDP, SGD with momentum, rows through prepare_data_loader, a
    checkpoint of the model and optimizer each step (TorchCheckpointIO), resumed with load_checkpoint."""
    from torch.utils.data import DataLoader

    import trainkit
    from trainkit_torch import load_checkpoint, prepare_data_loader, prepare_model

    torch.manual_seed(config["seed"])
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step, checkpoint = 0, trainkit.get_checkpoint()
    if checkpoint is not None:
        state = load_checkpoint(checkpoint)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    model, n = prepare_model(model, move_to_device=False), len(config["rows"])
    loader = prepare_data_loader(DataLoader(config["rows"], batch_size=n, shuffle=False), move_to_device=False)
    io = TorchCheckpointIO("model.pt")
    while step < config["steps"]:
        for batch in loader:
            x = (batch.float().unsqueeze(1) + 1) / n
            loss = ((model(x) - (3 * x + 1)) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        step += 1
        state = {"model": getattr(model, "module", model).state_dict(), "optimizer": optimizer.state_dict(),
                 "step": step}
        io.report({"step": step, "loss": loss.item(), "rows": [int(r) for r in batch]}, state)


class TestTorchBackend(BackendConformance):
    backend_config = TorchConfig()
    framework_modules = ("torch",)
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
    shard = staticmethod(shard)
    journey = staticmethod(journey)

    @pytest.fixture
    def preimported_modules(self, preimported_modules):
        """A first optimizer imports torch._dynamo, which sets TORCHINDUCTOR_CACHE_DIR (torch's doing,
        not the plugin's; seen in local mode, where the journey runs in this process): imported before
        the env guard's snapshot, as the framework is."""
        return (*preimported_modules, "torch._dynamo")
    report_callback = NOT_PROVIDED("trainkit-torch has no report callback: a torch loop calls trainkit.report itself")


class TestTorchCheckpointIO(CheckpointConformance):
    checkpoint_io = TorchCheckpointIO("model.pt")
    resume = staticmethod(load_checkpoint)  # the resume helper: the state in the checkpoint given

    def make_state(self, seed):
        return {"weight": torch.arange(6.0).reshape(2, 3) + seed, "epoch": 3}

    def assert_same(self, loaded, saved):
        assert torch.equal(loaded["weight"], saved["weight"]) and loaded["epoch"] == saved["epoch"]
