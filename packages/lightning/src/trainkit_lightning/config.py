"""``LightningConfig``: the torch process group, named for Lightning. Imports no torch or Lightning."""

from __future__ import annotations

from dataclasses import dataclass

from trainkit_torch.config import TorchConfig


@dataclass
class LightningConfig(TorchConfig):
    """``TorchConfig`` under the backend name ``lightning``: Lightning's strategies join the process
    group trainkit-torch sets up. Lightning itself is not pre-imported on the workers: which of its two
    import names a run uses is read from what the training function imports."""
