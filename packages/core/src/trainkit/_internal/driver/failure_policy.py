"""What the driver does after an attempt ends: finish, retry, resize or give up, and why.

Plain data in and out, so the rules are testable without Ray. A preemption (a drained node, a
SIGTERM'd worker: see ``preemption``) has its own budget, ``FailureConfig.max_preemption_failures``,
as in Ray Train; every other failure counts against ``max_failures``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainkit._internal.interface import setting
from trainkit.errors import FailureKind


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended. ``error_type``: the failure's (a ``FailureKind``, or an exception's class name),
    None when the attempt did not fail."""

    error_type: str | None = None
    failed: bool = False
    resize_to: int | None = None  # elastic: stopped to restart at this size (resources returned)
    interrupted: bool = False  # the driver got Ctrl-C
    preempted: bool = False  # the failure was a preemption's (a PreemptionError)
    storage_full: str | None = None  # the failure was a full disk or quota: the error's words (no retry)


@dataclass(frozen=True)
class Decision:
    action: Literal["finish", "retry", "resize", "give_up", "interrupted"]
    reason: str
    size: int | None = None  # the next attempt's size (None: what fits, or max_workers)
    show_where: bool = False  # a stuck worker's stack goes with the retry note, or a retry hides the bug


class FailurePolicy:
    def __init__(self, max_failures: int, max_preemption_failures: int = -1):
        self.max_failures = max_failures  # -1: retry forever
        self.max_preemption_failures = max_preemption_failures
        self.failures = 0
        self.preemptions = 0

    def decide(self, outcome: Outcome) -> Decision:
        if outcome.interrupted:
            return Decision("interrupted", "interrupted by the user (Ctrl-C)")
        if outcome.resize_to is not None:
            return Decision("resize", f"resources returned: restarting with {outcome.resize_to} workers",
                            size=outcome.resize_to)
        if not outcome.failed:
            return Decision("finish", "training finished")
        if outcome.error_type == "RunLockedError":  # the lease is lost: a retry could only overwrite the new driver
            return Decision("give_up", "this driver lost the run's lease (RunLockedError): no retries")
        if outcome.error_type == FailureKind.CLUSTER_DIED:  # every worker and the driver's connection went with it
            return Decision("give_up", "the embedded Ray cluster is gone: no retries; run it again with the same "
                                       "name to resume from its last checkpoint")
        if outcome.storage_full:  # a retry would fail the same way, after losing the attempt's progress
            return Decision("give_up", f"storage is full ({outcome.storage_full}): no retries; free space and "
                                       "run it again with the same name to resume from its last checkpoint")
        if outcome.preempted:
            self.preemptions += 1
            count, budget, what, field = self.preemptions, self.max_preemption_failures, "preemption", \
                "max_preemption_failures"
        else:
            self.failures += 1
            count, budget, what, field = self.failures, self.max_failures, "failure", "max_failures"
        limit = "unlimited" if budget == -1 else str(budget)
        counted = f"{what} {count} of {setting(field, limit)}"
        if budget != -1 and count > budget:
            return Decision("give_up", f"{counted}: no retries left")
        return Decision("retry", counted, show_where=outcome.error_type == FailureKind.WORKER_STUCK)
