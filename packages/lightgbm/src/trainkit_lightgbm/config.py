"""``LightGBMConfig``: network settings. Importing this module does not import lightgbm."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainkit import BackendConfig
from trainkit.validation import check_positive


@dataclass
class LightGBMConfig(BackendConfig):
    """How workers form LightGBM's socket network.

    Attributes:
        timeout_s: how long the network's sockets wait (LightGBM's ``time_out``, rounded up to minutes).
    """

    prewarm_modules: ClassVar[tuple[str, ...]] = ("lightgbm",)

    timeout_s: float = 7200.0

    def __post_init__(self) -> None:
        check_positive("timeout_s", self.timeout_s)

    @property
    def backend_cls(self):
        from trainkit_lightgbm.backend import LightGBMBackend

        return LightGBMBackend
