"""``XGBoostConfig``: collective settings. Importing this module does not import xgboost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, ContextManager

from trainkit import BackendConfig
from trainkit.validation import check_positive


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
        check_positive("timeout_s", self.timeout_s)

    @property
    def backend_cls(self):
        from trainkit_xgboost.backend import XGBoostBackend

        return XGBoostBackend

    def train_fn_context(self) -> ContextManager[object]:
        from trainkit_xgboost.backend import communicator

        return communicator()
