"""trainkit-hf against trainkit.testing's backend conformance suite (gloo on 2 CPU workers)."""

from trainkit.testing import BackendConformance
from trainkit_hf import HFConfig
from trainkit_torch.testing import all_gather, framework_rank, is_initialized


class TestHFBackend(BackendConformance):
    backend_config = HFConfig()
    framework_modules = ("torch", "transformers", "accelerate", "deepspeed", "datasets")
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
