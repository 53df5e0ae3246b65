"""``MyFrameworkConfig``: the framework's settings. Importing this module does not import it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainkit import BackendConfig
from trainkit.validation import check_positive


@dataclass
class MyFrameworkConfig(BackendConfig):
    """How workers join MyFramework's communication.

    Attributes:
        timeout_s: how long a worker waits for the others to join.
    """

    # Imported on every worker while the driver is still wiring the group.
    prewarm_modules: ClassVar[tuple[str, ...]] = ("myframework",)

    timeout_s: float = 300.0

    def __post_init__(self) -> None:  # bad input fails here, naming the field, before any work starts
        check_positive("timeout_s", self.timeout_s)  # trainkit.validation: invalid(), check_int() too

    @property
    def backend_cls(self):
        from trainkit_myframework.backend import MyFrameworkBackend

        return MyFrameworkBackend
