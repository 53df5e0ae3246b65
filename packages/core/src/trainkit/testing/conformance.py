"""Conformance suites a plugin's tests subclass: the checks every backend and checkpoint helper
must pass, run with real Ray workers.

Example (in a plugin's ``tests/test_conformance.py``, with ``pytest_plugins = ["trainkit.testing"]``
in its ``conftest.py``); the three functions run on the workers::

    from trainkit.testing import BackendConformance, CheckpointConformance

    def framework_rank() -> int:                    # inside the training function
        return torch.distributed.get_rank()

    def all_gather(value: float) -> list[float]:    # inside the training function, on every rank
        gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather(gathered, torch.tensor([value], dtype=torch.float64))
        return [t.item() for t in gathered]

    def is_initialized() -> bool:                   # after Backend.on_shutdown
        return torch.distributed.is_initialized()

    class TestTorchBackend(BackendConformance):
        backend_config = TorchConfig()
        framework_modules = ("torch",)
        framework_rank = staticmethod(framework_rank)
        all_gather = staticmethod(all_gather)
        is_initialized = staticmethod(is_initialized)

    class TestTorchCheckpointIO(CheckpointConformance):
        checkpoint_io = TorchCheckpointIO()

        def make_state(self, seed):
            return {"w": torch.arange(4.0) + seed}

        def assert_same(self, loaded, saved):
            assert torch.equal(loaded["w"], saved["w"])
"""

from trainkit.testing._conformance.backend_suite import BackendConformance
from trainkit.testing._conformance.checkpoint_suite import CheckpointConformance

__all__ = ["BackendConformance", "CheckpointConformance"]
