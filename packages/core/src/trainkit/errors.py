"""Every error a trainkit user can meet, and trainkit's warning category, in one place.

``fit()`` raises a ``TrainingFailedError`` when a run fails after its retries: a
``WorkerGroupError`` when a worker raised, died or hung, a ``ControllerError`` when the driver
failed. The others are raised before or outside an attempt. Older import paths (``trainkit.X``,
``trainkit.result.X``) keep working.

Example::

    try:
        trainer.fit()
    except trainkit.errors.WorkerGroupError as exc:
        print(exc.rank, exc.error_type, exc.worker_failures)
"""

from __future__ import annotations

from typing import Any

from trainkit._internal.launch import ScriptExitError
from trainkit._internal.lock import RunLockedError
from trainkit._internal.plugins import UnknownBackendError
from trainkit._internal.retry import StorageError
from trainkit._internal.storage import CheckpointCorruptError, LinkInCheckpointError
from trainkit._internal.untrusted import NotRegularFileError

__all__ = [  # noqa: F822 - PlacementError comes from __getattr__
    "CheckpointCorruptError", "ControllerError", "LinkInCheckpointError", "NotRegularFileError", "PlacementError",
    "PreemptionError", "RunLockedError", "ScriptExitError", "StorageError", "TrainingFailedError", "TrainkitWarning",
    "UnknownBackendError", "WorkerGroupError"]

# Defined beside the code that raises them; a traceback names them where users import them.
for _error in (CheckpointCorruptError, LinkInCheckpointError, NotRegularFileError, RunLockedError, ScriptExitError,
               StorageError, UnknownBackendError):
    _error.__module__ = __name__


class TrainkitWarning(RuntimeWarning):
    """The category of every warning trainkit issues (also logged to the ``"trainkit"`` logger).
    ``warnings.filterwarnings("error", category=trainkit.errors.TrainkitWarning)`` makes them errors."""


class TrainingFailedError(RuntimeError):
    """A worker raised or died. ``rank``, ``error_type`` and ``worker_traceback`` say where and why;
    ``__cause__`` is the original exception when it could be carried over."""

    def __init__(self, message: str, *, rank: int | None = None, error_type: str | None = None,
                 worker_traceback: str = ""):
        super().__init__(message)
        self.rank = rank
        self.error_type = error_type
        self.worker_traceback = worker_traceback


class WorkerGroupError(TrainingFailedError):
    """A worker raised, died or stopped answering (Ray Train's name). ``worker_failures`` maps
    each failed rank to its exception.

    Example::

        try:
            trainer.fit()
        except trainkit.WorkerGroupError as exc:
            print(exc.worker_failures)        # {1: ValueError('bad batch')}
    """

    def __init__(self, message: str, worker_failures: dict[int, BaseException] | None = None, **details: Any):
        super().__init__(message, **details)
        self.worker_failures = dict(worker_failures or {})


class ControllerError(TrainingFailedError):
    """The driver failed (starting workers, storage, a callback), not a worker (Ray Train's name);
    ``controller_failure`` is the original exception."""

    def __init__(self, message: str, controller_failure: BaseException | None = None, **details: Any):
        super().__init__(message, **details)
        self.controller_failure = controller_failure


class PreemptionError(TrainingFailedError):
    """The attempt was ended by a preemption (Ray Train's name): a drained node or a SIGTERM'd
    worker (``trainkit.get_preemption_info()``), or a worker that Ray reports died of one. Counted
    against ``FailureConfig.max_preemption_failures``, not ``max_failures``; ``fit()`` raises it when
    that budget is spent. ``preemption_info``: the ``PreemptionInfo``; ``drain_timed_out``: True when
    the driver stopped the ranks at the deadline (+ ``preemption_grace_s``), False when they ended
    first; ``__cause__``: what ended the attempt then (a rank's death, say)."""

    def __init__(self, preemption_info: Any, drain_timed_out: bool = False,
                 worker_failures: dict[int, BaseException] | None = None, **details: Any):
        ranks = preemption_info.preempted_ranks
        details.setdefault("error_type", "Preempted")
        details.setdefault("rank", ranks[0] if ranks else None)
        super().__init__(f"Training was interrupted by node preemption (preempted_ranks={ranks}, "
                         f"drain_timed_out={drain_timed_out})", **details)
        self.preemption_info = preemption_info
        self.drain_timed_out = drain_timed_out
        self.worker_failures = dict(worker_failures or {})


def __getattr__(name: str) -> Any:
    if name == "PlacementError":  # ``ControllerError.controller_failure`` when workers cannot be placed
        from trainkit._internal.worker_group import PlacementError  # imports this module: loaded on first use

        return PlacementError
    raise AttributeError(f"module 'trainkit.errors' has no attribute {name!r}")
