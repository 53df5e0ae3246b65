"""Messages a worker sends to the driver, drained by the driver's long-poll."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any

from trainkit._internal.storage.checkpoint_files import FileEntry


@dataclass
class Report:
    rank: int
    index: int
    metrics: dict[str, Any]
    checkpoint_name: str | None = None
    tmp_path: str | None = None
    files: list[FileEntry] = field(default_factory=list)
    validation: Any = None  # True or a ValidationTaskConfig: validate this report's checkpoint
    error: str | None = None  # this rank's checkpoint upload failed: the index is closed without one


@dataclass
class Output:
    rank: int
    text: str  # whole lines, joined by "\n"
    progress: bool = False  # the latest state of a line redrawn in place (a progress bar)


@dataclass
class Finished:
    rank: int
    return_value: Any = None


@dataclass
class Failed:
    rank: int
    type_name: str
    message: str
    traceback: str
    exception: BaseException | None = None  # the original, when it pickles


@dataclass
class Preempted:
    """The rank's process got SIGTERM: it is going away at ``deadline_ms`` (UNIX ms)."""

    rank: int
    deadline_ms: int


class EventQueue:
    """A rank's events waiting for the driver's next poll.

    ``close()`` ends the waiting: it wakes a poll that waits now and lets none wait later, so when a
    failed attempt collects what the live ranks still hold (see ``Worker.drain``), every poll in
    flight answers at once instead of at its heartbeat timeout.
    """

    def __init__(self) -> None:
        self._events: collections.deque = collections.deque()
        self._ready = threading.Condition(threading.RLock())  # reentrant: the SIGTERM handler puts too
        self._closed = False

    def put(self, event: Any) -> None:
        with self._ready:
            self._events.append(event)
            self._ready.notify_all()

    def take(self, timeout: float | None, most: int) -> list[Any]:
        """Up to ``most`` events, waiting up to ``timeout`` s for the first (not once closed)."""
        with self._ready:
            self._ready.wait_for(lambda: self._events or self._closed, timeout)
            return [self._events.popleft() for _ in range(min(most, len(self._events)))]

    def close(self) -> list[Any]:
        """Every event still here; from now on no ``take`` waits."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
            events, self._events = list(self._events), collections.deque()
            return events
