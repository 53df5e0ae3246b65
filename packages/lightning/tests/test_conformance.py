"""trainkit-lightning against trainkit.testing's backend conformance suite (gloo on 2 CPU workers)."""

from trainkit.testing import NOT_PROVIDED, BackendConformance
from trainkit_lightning import LightningConfig
from trainkit_torch.testing import all_gather, framework_rank, is_initialized


class TestLightningBackend(BackendConformance):
    backend_config = LightningConfig()
    framework_modules = ("torch", "lightning", "pytorch_lightning")
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
    shard = NOT_PROVIDED("trainkit-lightning has no data helper: Lightning's strategies shard with its own sampler")
    report_callback = NOT_PROVIDED("not written for trainkit-lightning yet (issue 57 follow-up): its ReportCallback")
    journey = NOT_PROVIDED("not written for trainkit-lightning yet (issue 57 follow-up): a Trainer with prepare_trainer")
