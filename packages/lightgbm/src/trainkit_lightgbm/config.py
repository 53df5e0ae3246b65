"""``LightGBMConfig``: network settings. Importing this module does not import lightgbm."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainkit import BackendConfig


@dataclass
class LightGBMConfig(BackendConfig):
    """How workers form LightGBM's socket network.

    Attributes:
        timeout_min: LightGBM's ``time_out`` (minutes) for the network's sockets.
    """

    prewarm_modules: ClassVar[tuple[str, ...]] = ("lightgbm",)

    timeout_min: int = 120

    def __post_init__(self) -> None:
        if isinstance(self.timeout_min, bool) or not isinstance(self.timeout_min, int) or self.timeout_min <= 0:
            raise ValueError(f"timeout_min={self.timeout_min!r} is invalid: expected an int > 0 (minutes)")

    @property
    def backend_cls(self):
        from trainkit_lightgbm.backend import LightGBMBackend

        return LightGBMBackend

    @property
    def name(self) -> str:
        return "lightgbm"
