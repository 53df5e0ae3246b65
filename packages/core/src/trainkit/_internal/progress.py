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
import sys
import threading
import time
import traceback
from typing import Any, Iterator

from trainkit.result import WorkerGroupError

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

    def restart(self, workers: list[Any], running: set[int]) -> None:
        """The ranks' clocks stood still for a reason (a debugger session held them): they start
        over, as at the attempt's start."""
        if self.timeout_s is not None:
            self._next = time.monotonic() + self.timeout_s
            for rank in running:
                workers[rank].actor.restart_progress.remote()

    def check(self, workers: list[Any], running: set[int]) -> WorkerGroupError | None:
        import ray

        now = time.monotonic()
        if self.timeout_s is None or now < self._next:
            return None
        self._next = now + min(CHECK_EVERY_S, self.timeout_s / 4)
        refs = {workers[rank].actor.progress.remote(self.timeout_s): rank for rank in sorted(running)}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=ANSWER_S)
        stuck = {}
        for ref in ready:
            try:
                if answer := ray.get(ref):
                    stuck[refs[ref]] = answer
            except ray.exceptions.RayError:
                continue  # a dead rank: the poll reports it
        if not stuck:
            return None
        ranks = sorted(stuck)
        stacks = "\n".join(f"rank {rank}, no progress for {stuck[rank][0]:.0f} s, training thread:\n{stuck[rank][1]}"
                           for rank in ranks)
        message = (f"rank(s) {ranks} made no progress (no report() or trainkit collective) for more than "
                   f"{self.timeout_s:g} s (FailureConfig.progress_timeout_s)")
        return WorkerGroupError(f"{message}\n\n{stacks}", {rank: TimeoutError(message) for rank in ranks},
                                rank=ranks[0], error_type="WorkerStuck", worker_traceback=stacks)
