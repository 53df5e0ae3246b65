"""trainkit-lightning against trainkit.testing's backend conformance suite (gloo on 2 CPU workers)."""

from trainkit.testing import BackendConformance
from trainkit_lightning import LightningConfig
from trainkit_torch.testing import all_gather, framework_rank, is_initialized


class TestLightningBackend(BackendConformance):
    backend_config = LightningConfig()
    framework_modules = ("torch", "lightning", "pytorch_lightning")
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
