"""``XGBoostConfig``: collective settings. Importing this module does not import xgboost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, ContextManager

from trainkit import BackendConfig


@dataclass
class XGBoostConfig(BackendConfig):
    """How workers join XGBoost's collective.

    Attributes:
        timeout_s: how long the tracker waits for every worker to connect, and at the end for every
            worker to leave.
    """

    prewarm_modules: ClassVar[tuple[str, ...]] = ("xgboost",)

    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or self.timeout_s <= 0:
            raise ValueError(f"timeout_s={self.timeout_s!r} is invalid: expected a number > 0")

    @property
    def backend_cls(self):
        from trainkit_xgboost.backend import XGBoostBackend

        return XGBoostBackend

    def train_fn_context(self) -> ContextManager[object]:
        from trainkit_xgboost.backend import communicator

        return communicator()

    @property
    def name(self) -> str:
        return "xgboost"
