"""``JaxConfig``: how workers join ``jax.distributed``. Importing this module does not import JAX."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainkit import BackendConfig
from trainkit.validation import check_positive

PLATFORMS = (None, "cpu", "gpu", "tpu")


@dataclass
class JaxConfig(BackendConfig):
    """How workers join one ``jax.distributed`` run.

    Attributes:
        platform: "cpu", "gpu" or "tpu"; None picks "tpu" when the workers hold TPU chips, "gpu" when
            they reserved GPUs, else "cpu".
            On CPUs, cross-process collectives go over gloo.
        timeout_s: how long ``jax.distributed.initialize`` waits for every process to join.
    """

    # Importing JAX does not start its backends, so it is safe before jax.distributed.initialize.
    prewarm_modules: ClassVar[tuple[str, ...]] = ("jax",)

    platform: str | None = None
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.platform not in PLATFORMS:
            raise ValueError(f"platform={self.platform!r} is invalid: expected one of {PLATFORMS}")
        check_positive("timeout_s", self.timeout_s)

    @property
    def backend_cls(self):
        from trainkit_jax.backend import JaxBackend

        return JaxBackend
