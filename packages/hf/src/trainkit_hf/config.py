"""``HFConfig``: the torch process group, named for Hugging Face. Imports no torch or transformers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainkit_torch.config import TorchConfig


@dataclass
class HFConfig(TorchConfig):
    """``TorchConfig`` under the backend name ``hf``; its workers also start importing
    ``transformers`` (over a second on a cold start) while the group is still being set up."""

    prewarm_modules: ClassVar[tuple[str, ...]] = (*TorchConfig.prewarm_modules, "transformers")
