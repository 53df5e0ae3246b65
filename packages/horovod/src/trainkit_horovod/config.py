"""``HorovodConfig``: Gloo rendezvous settings. Importing this module does not import horovod."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import ClassVar

from trainkit import BackendConfig
from trainkit.validation import check_int, check_positive

INSTALL = "python -m trainkit_horovod.build"


def require_horovod() -> None:
    """Raise a clear error unless Horovod is installed (pip cannot build 0.28.1 against torch >= 2.1)."""
    if importlib.util.find_spec("horovod") is None:
        raise ModuleNotFoundError(
            f"Horovod is not installed. With torch installed, run `{INSTALL}`: it builds Horovod 0.28.1 "
            "with a C++17 patch (pip cannot build it against torch >= 2.1), caches the wheel and installs it")


@dataclass
class HorovodConfig(BackendConfig):
    """How workers form Horovod's Gloo context (no MPI, no ``horovodrun``): ``hvd.init()`` in the
    training function then sees trainkit's ranks.

    Attributes:
        nics: network interfaces Gloo may use (it takes the first by name); None picks, on every worker,
            the interface that holds the address the other workers reach it at (loopback on one node).
        timeout_s: how long ``hvd.init()`` waits for every rank at the rendezvous.
        verbose: above 0, Horovod's rendezvous server logs every request.

    Example::

        HorovodTrainer(train_fn, horovod_config=HorovodConfig(nics={"eth0"}, timeout_s=600))
    """

    prewarm_modules: ClassVar[tuple[str, ...]] = ("torch", "horovod.torch")

    nics: set[str] | None = None
    timeout_s: float = 300.0
    verbose: int = 0

    def __post_init__(self) -> None:
        if self.nics is not None and (isinstance(self.nics, str) or not self.nics
                                      or not all(isinstance(n, str) and n for n in self.nics)):
            raise ValueError(f"nics={self.nics!r} is invalid: expected None or a non-empty set of interface "
                             "names, e.g. {'eth0'}")
        check_positive("timeout_s", self.timeout_s)
        check_int("verbose", self.verbose, 0)
        require_horovod()

    @property
    def backend_cls(self):
        from trainkit_horovod.backend import HorovodBackend

        return HorovodBackend
