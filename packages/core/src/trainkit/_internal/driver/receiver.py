"""The driver's ear: a thread that keeps one poll outstanding on every rank and queues what comes back.

Events leave a worker only when a poll takes them. Polled from the driver's own loop, they would
wait in the worker while the driver commits a checkpoint or runs a slow callback, and a rank that
died meanwhile took them with it: its last output and the reports that had already returned. Here
they leave as they happen; the driver handles them in arrival order whenever it is free.

The queue is bounded: a driver that falls far behind stops the polls, and the backlog waits in the
workers (in bounded batches, see ``Worker.poll``) instead of growing the driver's memory.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, NamedTuple, Sequence

from trainkit._internal.worker.events import Finished

WAKE_S = 0.05  # how soon the thread sees stop() or a queue the driver emptied
BATCHES_PER_RANK = 4  # queued and not yet handled, before the polls stop


class Received(NamedTuple):
    rank: int
    events: Sequence[Any] = ()
    error: BaseException | None = None  # the poll raised it (the rank died, say)


class EventReceiver:
    def __init__(self, group: Any, poll_s: float):
        self._group, self._poll_s = group, poll_s
        self._queue: queue.SimpleQueue[Received] = queue.SimpleQueue()
        self._most_queued = BATCHES_PER_RANK * len(group)
        self._outstanding: dict[Any, tuple[int, float]] = {}  # poll -> (rank, when it was sent)
        self._lock = threading.Lock()  # over _outstanding, which silent() reads
        self._paused = list(range(len(group)))  # ranks to poll (again) once the driver caught up
        self._stopping = threading.Event()
        self._failure: BaseException | None = None  # what ended the thread early, raised by get()
        self._thread = threading.Thread(target=self._run, name="trainkit-receiver", daemon=True)
        self._thread.start()

    def get(self, timeout: float) -> list[Received]:
        """What arrived: waits up to ``timeout`` s for the first, then takes all that are queued."""
        if self._failure is not None and self._queue.empty():
            raise RuntimeError(f"the driver stopped receiving the workers' events: {self._failure!r}") from self._failure
        return self._take(timeout)

    def stop(self) -> tuple[list[Received], dict[Any, int]]:
        """Stop polling: what arrived and was not taken yet, and the polls still outstanding."""
        self._stopping.set()
        self._thread.join()
        return self._take(timeout=0), {ref: rank for ref, (rank, _) in self._outstanding.items()}

    def _take(self, timeout: float) -> list[Received]:
        try:
            received = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            return []
        while not self._queue.empty():
            received.append(self._queue.get_nowait())
        return received

    def silent(self) -> dict[int, float]:
        """Seconds each rank has left its outstanding poll unanswered (a live rank answers within
        ``poll_s``). A rank the driver is not asking (finished, or paused while the driver catches
        up on a backlog) is not silent."""
        now = time.monotonic()
        with self._lock:
            return {rank: now - asked for rank, asked in self._outstanding.values()}

    def _poll(self, rank: int) -> None:
        ref = self._group.call(rank, "poll", self._poll_s)
        with self._lock:
            self._outstanding[ref] = (rank, time.monotonic())

    def _run(self) -> None:
        try:
            self._receive()
        except BaseException as exc:  # noqa: BLE001 - handed to the driver's loop by get()
            self._failure = exc

    def _receive(self) -> None:
        import ray

        while not self._stopping.is_set():
            if self._paused and self._queue.qsize() < self._most_queued:
                for rank in self._paused:
                    self._poll(rank)
                self._paused = []
            if not self._outstanding:
                if not self._paused:
                    return  # every rank finished
                time.sleep(WAKE_S)
                continue
            ready, rest = ray.wait(list(self._outstanding), num_returns=1, timeout=WAKE_S)
            if ready and rest:
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in ready:
                with self._lock:
                    rank, _ = self._outstanding.pop(ref)
                try:
                    events = ray.get(ref)
                except ray.exceptions.RayError as exc:  # dead, or an event that cannot be unpickled here
                    self._queue.put(Received(rank, error=exc))
                    continue
                if events:  # an empty answer says only that the rank is alive: silent() knows
                    self._queue.put(Received(rank, events))
                if not any(isinstance(event, Finished) for event in events):
                    self._paused.append(rank)
