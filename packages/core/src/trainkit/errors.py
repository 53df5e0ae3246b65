"""Every error a trainkit user can meet, and trainkit's warning category, in one place.

``fit()`` raises a ``TrainingFailedError`` when a run fails after its retries: a
``WorkerGroupError`` when a worker raised, died or hung, a ``ControllerError`` when the driver
failed. The others are raised before or outside an attempt. Older import paths (``trainkit.X``,
``trainkit.result.X``) keep working. This module imports nothing of trainkit: every
layer may raise its errors.

Example::

    try:
        trainer.fit()
    except trainkit.errors.WorkerGroupError as exc:
        print(exc.rank, exc.error_type, exc.worker_failures)
"""

from __future__ import annotations

import enum
import signal
from typing import Any

__all__ = [
    "CheckpointCorruptError", "ControllerError", "FailureKind", "LinkInCheckpointError", "NotRegularFileError", "PlacementError",
    "PreemptionError", "RunLockedError", "ScriptExitError", "StorageError", "TrainingFailedError", "TrainkitWarning",
    "UnknownBackendError", "WorkerGroupError"]


class TrainkitWarning(RuntimeWarning):
    """The category of every warning trainkit issues (also logged to the ``"trainkit"`` logger).
    ``warnings.filterwarnings("error", category=trainkit.errors.TrainkitWarning)`` makes them errors."""


class FailureKind(str, enum.Enum):
    """``TrainingFailedError.error_type`` (and a failure's ``type`` in ``run_state.json``) when
    trainkit, not the training function, names what failed; otherwise it is the exception's class
    name (``"ValueError"``). A member equals its string: ``error.error_type == "WorkerDied"``."""

    WORKER_DIED = "WorkerDied"  # a rank's process or node is gone
    WORKER_HUNG = "WorkerHung"  # a rank stopped answering the driver (``worker_timeout_s``)
    WORKER_STUCK = "WorkerStuck"  # a rank neither reported nor entered a collective (``progress_timeout_s``)
    PREEMPTED = "Preempted"  # a drained node or a SIGTERM'd worker (``PreemptionError``)
    CLUSTER_DIED = "ClusterDied"  # the embedded Ray cluster's GCS or raylet ended: nothing can run on it

    def __str__(self) -> str:  # the name users read, on every Python (3.12 changed mixed-in enums' str)
        return self.value


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
        details.setdefault("error_type", FailureKind.PREEMPTED)
        details.setdefault("rank", ranks[0] if ranks else None)
        super().__init__(f"Training was interrupted by node preemption (preempted_ranks={ranks}, "
                         f"drain_timed_out={drain_timed_out})", **details)
        self.preemption_info = preemption_info
        self.drain_timed_out = drain_timed_out
        self.worker_failures = dict(worker_failures or {})

    def __reduce__(self) -> tuple:  # survives a pickle (trainkit-warm's standby driver sends it back)
        return PreemptionError, (self.preemption_info, self.drain_timed_out, self.worker_failures), \
            {**self.__dict__, "args": self.args}  # (the driver adds the budget spent to its message)


# -- raised before or outside an attempt --

class ScriptExitError(RuntimeError):
    """A rank's script exited with a non-zero status (``returncode``; -N: killed by signal N).
    ``error``: what ``torch.distributed.elastic``'s ``@record`` wrote to ``TORCHELASTIC_ERROR_FILE``
    (its JSON), when the script wrote one."""

    def __init__(self, script: str, returncode: int, error: dict | None = None):
        status = f"was killed by signal {-returncode} ({_signal_name(-returncode)})" if returncode < 0 \
            else f"exited with status {returncode}"
        message = error and _error_message(error)
        super().__init__(f"{script} {status}" + (f": {message}" if message else ""))
        self.script, self.returncode, self.error = script, returncode, error

    def __reduce__(self) -> tuple:
        return ScriptExitError, (self.script, self.returncode, self.error)


def _error_message(error: dict) -> str | None:
    """The one line torchrun's failure summary shows of an error file (``{"message": {"message": ...}}``)."""
    message = error.get("message")
    message = message.get("message") if isinstance(message, dict) else message
    return str(message).strip().splitlines()[0] if message and str(message).strip() else None


class RunLockedError(RuntimeError):
    """Another driver is running this run."""


class UnknownBackendError(ValueError):
    """No installed plugin provides the requested backend, or more than one claims it."""


class StorageError(OSError):
    """A storage operation failed for good. ``errno``, ``filename`` and ``operation`` say which."""

    def __init__(self, operation: str, path: str, cause: BaseException):
        code = getattr(cause, "errno", None)
        reason = getattr(cause, "strerror", None) or str(cause)
        super().__init__(code, f"{operation} failed: {reason}", path)
        self.operation = operation

    def __reduce__(self):  # errno, message and path survive a pickle (a Ray worker's error)
        return _rebuild, (self.operation, self.filename, self.errno, self.strerror)


def _rebuild(operation: str, path: str, code: int | None, message: str) -> StorageError:
    error = StorageError.__new__(StorageError)
    OSError.__init__(error, code, message, path)
    error.operation = operation
    return error


class CheckpointCorruptError(ValueError):
    """A checkpoint's files do not match its manifest (or it has none)."""


class LinkInCheckpointError(ValueError):
    """A reported checkpoint directory holds a symbolic link or a file that is not a regular file."""


class NotRegularFileError(OSError):
    """A file read back from storage is a FIFO, socket, device, directory or symbolic link."""


class PlacementError(RuntimeError):
    """The cluster cannot place the requested workers."""


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "unknown"
