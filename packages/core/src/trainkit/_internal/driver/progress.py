"""The progress watchdog: a rank that neither reports nor enters a trainkit collective for
``FailureConfig.progress_timeout_s`` is stuck (a deadlock, an endless loop, a hung read in user
code: its heartbeat still answers). The driver names it with its training thread's stack and
fails the attempt, so ``max_failures`` applies.

Workers keep a ``Progress`` clock (reset by ``report()`` and at each end of a collective call; a
rank waiting inside a collective is waiting for its peers, not stuck); the driver asks them with
``ProgressWatch.check`` every quarter of the timeout (at most every 10 s).
"""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import time
import traceback
from typing import Any, Iterator

from trainkit.errors import FailureKind, WorkerGroupError

CHECK_EVERY_S = 10.0
ANSWER_S = 2.0  # a rank that does not answer the check in time is the heartbeat's business


class Progress:
    """One rank's progress clock."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self._waiting = 0

    def mark(self) -> None:
        self.last = time.monotonic()

    @contextlib.contextmanager
    def waiting_for_peers(self) -> Iterator[None]:
        self._waiting += 1
        try:
            yield
        finally:
            self._waiting -= 1
            self.mark()

    def stalled(self, thread: threading.Thread | None, timeout_s: float) -> tuple[float, str] | None:
        """(seconds without progress, ``thread``'s current stack) once that exceeds ``timeout_s``."""
        stalled_s = time.monotonic() - self.last
        if self._waiting or stalled_s <= timeout_s or thread is None or not thread.is_alive():
            return None
        frame = sys._current_frames().get(thread.ident)
        return stalled_s, "".join(traceback.format_stack(frame)) if frame else "(no stack)"


class ProgressWatch:
    """The driver side: ``check`` returns the attempt's error once some rank is stuck."""

    def __init__(self, timeout_s: float | None):
        self.timeout_s = timeout_s
        self._next = time.monotonic() + (timeout_s or 0)  # no rank can be stuck before that

    def restart(self, group: Any, running: set[int]) -> None:
        """The ranks' clocks stood still for a reason (a debugger session held them): they start
        over, as at the attempt's start."""
        if self.timeout_s is not None:
            self._next = time.monotonic() + self.timeout_s
            group.call_each("restart_progress", ranks=running)

    def check(self, group: Any, running: set[int]) -> WorkerGroupError | None:
        now = time.monotonic()
        if self.timeout_s is None or now < self._next:
            return None
        self._next = now + min(CHECK_EVERY_S, self.timeout_s / 4)
        stuck = _stalled(group, sorted(running), self.timeout_s)
        if not stuck:
            return None
        # The other ranks' stacks too: the rank that holds up peers waiting in a collective may have
        # gone quiet a moment after them (its clock has not passed the timeout yet), or still runs.
        seen = {**_stalled(group, sorted(running - stuck.keys()), 0.0), **stuck}
        waiting = [rank for rank in sorted(seen) if in_collective(seen[rank][1])]
        culprits = [rank for rank in sorted(seen) if rank not in waiting] if waiting else sorted(stuck)
        culprits = culprits or waiting  # the ranks to look at first
        named = {rank: seen[rank] for rank in {*stuck, *culprits, *waiting}}
        ranks = sorted(stuck)
        message = (f"rank(s) {ranks} made no progress (no report() or trainkit collective) for more than "
                   f"{self.timeout_s:g} s (FailureConfig.progress_timeout_s)")
        if waiting and culprits != waiting:
            message += (f"; {_ranks(culprits)} {_is(culprits)} not in a collective: look there; "
                        f"{_ranks(waiting)} {_is(waiting)} waiting in a collective for it")
        elif waiting:
            message += "; all of them are waiting in a collective (one they do not all call, or a peer gone)"
        stacks = "\n".join(f"rank {rank}{' (waiting in a collective)' if rank in waiting else ''}, no progress for "
                           f"{named[rank][0]:.0f} s, training thread:\n{named[rank][1]}"
                           for rank in culprits + [r for r in sorted(named) if r not in culprits])
        return WorkerGroupError(f"{message}\n\n{stacks}", {rank: TimeoutError(message) for rank in sorted(named)},
                                rank=culprits[0], error_type=FailureKind.WORKER_STUCK, worker_traceback=stacks)


def _stalled(group: Any, ranks: list[int], timeout_s: float) -> dict[int, tuple[float, str]]:
    """The ranks (of ``ranks``) without progress for more than ``timeout_s``: (seconds, stack)."""
    import ray

    if not ranks:
        return {}
    refs = group.call_each("progress", timeout_s, ranks=ranks)
    stalled = {}
    for ref in ray.wait(list(refs), num_returns=len(refs), timeout=ANSWER_S)[0]:
        try:
            if answer := ray.get(ref):
                stalled[refs[ref]] = answer
        except ray.exceptions.RayError:
            continue  # a dead rank: the poll reports it
    return stalled


# Where a rank waits for its peers: a frame in a framework's communication layer, or a collective
# call of an installed package.
_COLLECTIVE_FILE = re.compile(r"torch/distributed/|deepspeed/comm/|horovod/|jax/_src/distributed|mpi4py/")
_COLLECTIVE_CALL = re.compile(r"all_?reduce|all_?gather\w*|reduce_scatter\w*|all_to_all\w*|\w*barrier|broadcast\w*")
_FRAME = re.compile(r'File "([^"]+)", line \d+, in (\S+)')


def in_collective(stack: str) -> bool:
    """Whether a training thread's stack (``traceback.format_stack``) is inside a collective: a frame
    of torch.distributed (c10d: gloo, nccl), DeepSpeed's or Horovod's comm, or a collective call
    (all_reduce, barrier, ...) in an installed package."""
    for path, function in _FRAME.findall(stack):
        path = path.replace("\\", "/")
        if _COLLECTIVE_FILE.search(path) or ("-packages/" in path and _COLLECTIVE_CALL.fullmatch(function)):
            return True
    return False


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _is(ranks: list[int]) -> str:
    return "is" if len(ranks) == 1 else "are"
