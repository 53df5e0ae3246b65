"""``TorchConfig``: process-group settings. Importing this module does not import torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

from trainkit import BackendConfig
from trainkit.validation import check_positive


@dataclass
class TorchConfig(BackendConfig):
    """How workers form a ``torch.distributed`` process group.

    Attributes:
        backend: ``"gloo"``, ``"nccl"`` or any backend torch knows; None picks nccl on GPUs, else gloo.
        init_method: ``"env"`` (MASTER_ADDR/PORT) or ``"tcp"``.
        timeout_s: collective timeout; a collective stuck longer fails with an error.
    """

    # torch._dynamo: DistributedDataParallel's constructor imports it (about 800 modules, as long as
    # torch's own import); imported ahead, it is off the training function's path
    prewarm_modules: ClassVar[tuple[str, ...]] = ("torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo")
    fork_safe: ClassVar[bool] = True  # importing torch starts no thread a fork would share

    @classmethod
    def after_fork(cls, loaded_env: Mapping[str, str]) -> None:
        """A child forked from the process that imported torch (``fork.py``): its thread pools, and
        process groups a script destroys kept until it exits."""
        from trainkit_torch.fork import after_fork

        after_fork(loaded_env)

    backend: str | None = None
    init_method: str = "env"
    timeout_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.init_method not in ("env", "tcp"):
            raise ValueError(f"init_method={self.init_method!r} is invalid: expected 'env' or 'tcp'")
        check_positive("timeout_s", self.timeout_s)
        if self.backend is not None and (not isinstance(self.backend, str) or not self.backend):
            raise ValueError(f"backend={self.backend!r} is invalid: expected None, 'gloo', 'nccl' or another torch backend")

    @property
    def backend_cls(self):
        from trainkit_torch.backend import TorchBackend

        return TorchBackend
