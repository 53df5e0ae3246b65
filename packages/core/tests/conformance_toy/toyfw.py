"""toyfw, the pure-Python "framework" of the conformance suite's own tests: a process is given its
rank by ``init``; ``all_gather`` exchanges values through trainkit's collective rendezvous and
orders them by toyfw's ranks. Like some real frameworks, importing it sets an environment variable."""

from __future__ import annotations

import os

os.environ.setdefault("TOYFW_IMPORTED", "1")

_rank: int | None = None


def init(rank: int) -> None:
    global _rank
    if _rank is not None:
        raise RuntimeError("toyfw is already initialized in this process")
    _rank = rank


def shutdown() -> None:
    global _rank
    _rank = None


def is_initialized() -> bool:
    return _rank is not None


def get_rank() -> int:
    if _rank is None:
        raise RuntimeError("toyfw is not initialized")
    return _rank


def all_gather(value: float) -> list[float]:
    from trainkit.collective import _exchange

    by_trainkit_rank = _exchange("toyfw.all_gather", (get_rank(), value), timeout_s=60)
    return [v for _, v in sorted(by_trainkit_rank.values())]
