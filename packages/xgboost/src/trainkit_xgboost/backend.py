"""``XGBoostBackend``: runs XGBoost's tracker on rank 0 and puts every worker's training function
inside XGBoost's communicator, so ``xgboost.train`` there builds each tree from every rank's rows.

XGBoost 2.1 replaced the Python tracker (``start(n)``, ``worker_envs()``, ``DMLC_*`` names) with a
C++ one (``start()``, ``worker_args()``, ``dmlc_*`` names); both are supported.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator

import trainkit
from trainkit import Backend

from trainkit_xgboost.config import XGBoostConfig

_tracker: Any = None  # rank 0's tracker
_communicator_args: dict[str, Any] | None = None  # this worker's, between on_training_start and on_shutdown


def _start_tracker(host: str, num_workers: int, timeout_s: float) -> dict[str, Any]:
    """Start the tracker on ``host``, on a port the OS picks as it binds; the workers' arguments."""
    from xgboost.tracker import RabitTracker

    global _tracker
    if hasattr(RabitTracker, "worker_args"):  # xgboost >= 2.1
        _tracker = RabitTracker(n_workers=num_workers, host_ip=host, port=0, sortby="task",
                                timeout=math.ceil(timeout_s))
        _tracker.start()
        return _tracker.worker_args()
    _tracker = RabitTracker(host_ip=host, n_workers=num_workers, port=0, sortby="task")
    _tracker.start(num_workers)
    return {**_tracker.worker_envs(), "DMLC_NUM_WORKER": num_workers}


def _stop_tracker(timeout_s: float) -> None:
    global _tracker
    tracker, _tracker = _tracker, None
    if tracker is None:
        return
    if hasattr(tracker, "wait_for"):  # every worker has left the collective by now
        tracker.wait_for(math.ceil(timeout_s))
        tracker.free()
    else:
        tracker.thread.join(timeout_s)
        tracker.sock.close()


def _set_communicator_args(args: dict[str, Any]) -> None:
    global _communicator_args
    task_key = "dmlc_task_id" if "dmlc_tracker_uri" in args else "DMLC_TASK_ID"
    # With sortby="task" XGBoost orders ranks by task id: zero-padded, they follow trainkit's ranks.
    _communicator_args = {**args, task_key: f"{trainkit.get_context().get_world_rank():08d}"}


def _clear_communicator_args() -> None:
    global _communicator_args
    _communicator_args = None


@contextlib.contextmanager
def communicator() -> Iterator[None]:
    """XGBoost's communicator around the training function; nothing in local mode."""
    if _communicator_args is None:
        yield
        return
    from xgboost.collective import CommunicatorContext

    with CommunicatorContext(**_communicator_args):
        yield


class XGBoostBackend(Backend):
    def on_training_start(self, worker_group, backend_config: XGBoostConfig) -> None:
        host = worker_group.node_address(0)  # the tracker binds a port of its own (0) and publishes it
        args = worker_group.execute_single(0, _start_tracker, host, len(worker_group), backend_config.timeout_s)
        worker_group.execute(_set_communicator_args, args)

    def on_shutdown(self, worker_group, backend_config: XGBoostConfig) -> None:
        worker_group.execute(_clear_communicator_args)
        worker_group.execute_single(0, _stop_tracker, backend_config.timeout_s)
