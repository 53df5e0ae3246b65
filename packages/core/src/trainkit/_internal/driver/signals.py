"""The driver's stop signals: SIGTERM (Kubernetes, Slurm, systemd), SIGHUP (the terminal closed) and
SIGINT (Ctrl-C) all stop a ``fit()`` the way Ctrl-C does: ``Interrupted`` (a ``KeyboardInterrupt``)
is raised in the main thread, the attempt's workers are stopped, the run is recorded as
``interrupted`` and the program exits 128 + the signal's number with one line.

A handler is installed only while ``fit()`` runs in the main thread, and only for a signal whose
disposition is still the default one (SIG_DFL, Python's Ctrl-C handler, or the handler Ray's
embedded start installs): a handler of the user's, or SIG_IGN (``nohup``), is left in force, also
against Ray's start, which would replace it. The dispositions found are restored when ``fit()``
returns.

A checkpoint commit (files, metrics line, the state naming it) is a fence: a stop signal arriving
inside one takes effect at its end, so the run stops with that checkpoint committed whole; once
stopping, no commit starts, and the driver records the stop only after one under way in another
thread (local mode's upload thread) has ended (``settle()``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(KeyboardInterrupt):
    """A stop signal reached the driver; ``signum`` is its number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def describe(signum: int) -> str:
    """How the interruption is named to the user: 'Ctrl-C' or the signal's name."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


_fence = threading.Condition()  # reentrant: the handler may run while the main thread holds it
_committing: set[threading.Thread] = set()  # the threads inside a commit
_pending: int | None = None  # a signal that arrived while the main thread was committing
_stopping: int | None = None  # the signal the driver is stopping on


def handler(signum: int, frame: Any) -> None:
    global _pending, _stopping
    with _fence:
        if _stopping is not None:  # the clean stop is under way (SIGKILL forces it)
            return
        if threading.current_thread() in _committing:  # stop at the end of this commit
            _pending = signum
            return
        _stopping = signum  # no commit starts from now on; one in another thread ends whole (settle())
    raise Interrupted(signum)


def settle() -> None:
    """Wait until no thread is inside a commit (the stopping driver's last look at its state)."""
    with _fence:
        _fence.wait_for(lambda: not _committing)


def _is_default(found: Any) -> bool:
    if found in (signal.SIG_DFL, signal.default_int_handler, handler):
        return True
    return (getattr(found, "__module__", None) or "").startswith("ray.")  # what Ray's embedded start installs


@contextlib.contextmanager
def committing() -> Iterator[None]:
    """A commit: a stop signal waits for its end. Raises ``Interrupted`` instead of starting one
    once the driver is stopping, and at its end when a signal arrived inside it."""
    global _pending, _stopping
    me = threading.current_thread()
    with _fence:
        if _stopping is not None:
            raise Interrupted(_stopping)
        _committing.add(me)
    try:
        yield
    finally:
        with _fence:
            _committing.discard(me)
            _fence.notify_all()
            signum, _pending = _pending, None
            if signum is not None:
                _stopping = signum
        if signum is not None:
            raise Interrupted(signum)


class StopSignals:
    """Route the stop signals to ``Interrupted`` while ``fit()`` runs (see the module docstring):
    ``with StopSignals() as stop_signals:`` installs, ``stop_signals.install()`` again after Ray's
    start (which replaces SIGTERM's handler), and the end of the block restores."""

    def __init__(self) -> None:
        self.active = threading.current_thread() is threading.main_thread()
        self.found = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} if self.active else {}
        self.replaced: dict[int, Any] = {}  # what ours replaced, put back by restore()

    def install(self) -> None:
        global _pending, _stopping
        if not self.replaced:
            _pending = _stopping = None
        for sig, found in self.found.items():
            current = signal.getsignal(sig)
            if found is None:  # set outside Python: leave it
                continue
            if not _is_default(found):  # the user's own handler, or SIG_IGN: it stays in force
                if current is not found:
                    signal.signal(sig, found)
            elif current is not handler:
                self.replaced[sig] = current
                signal.signal(sig, handler)

    def restore(self) -> None:
        for sig, previous in self.replaced.items():
            signal.signal(sig, previous)
        self.replaced.clear()

    def __enter__(self) -> "StopSignals":
        self.install()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()
