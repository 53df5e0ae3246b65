"""A worker's ``sys.stdout``/``sys.stderr``: whole lines go to the driver (which shows them and keeps
them in the run directory's ``logs/``); a line redrawn in place with ``\\r`` (a tqdm progress bar)
goes as its latest state, marked ``progress``, and once finished as one line.

Nothing is written to the process's original stream: Ray forwards that stream to a driver that
called ``ray.init()`` itself (``log_to_driver``), which would show every line twice.
"""

from __future__ import annotations

import io
import threading
from typing import Any, Callable

from trainkit._internal.worker.events import Output


def shown(line: str) -> str:
    """What a terminal shows of a line with carriage returns: the text after the last one."""
    return line.rstrip("\r").rsplit("\r", 1)[-1]


class RankOutput(io.TextIOBase):
    def __init__(self, original: Any, rank: int, put: Callable[[Any], None]):
        self._original, self._rank, self._put = original, rank, put
        self._partial = ""
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            lines = (self._partial + text).split("\n")
            partial = lines.pop()
            redrawn = partial.rstrip("\r").rfind("\r")
            self._partial = partial[max(redrawn, 0):]  # only the latest state of a redrawn line
        if lines:
            self._put(Output(self._rank, "\n".join(shown(line) for line in lines)))
        if redrawn >= 0 and shown(partial):
            self._put(Output(self._rank, shown(partial), progress=True))
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if "\r" in self._partial:  # a progress line stays open until its newline
                return
            partial, self._partial = self._partial, ""
        if partial:
            self._put(Output(self._rank, partial))

    def fileno(self) -> int:
        return self._original.fileno()

    def isatty(self) -> bool:
        return False
