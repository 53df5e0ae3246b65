"""The types of ``trainkit.context`` (re-exported there): what a rank knows of its place in the run,
and the modes ``report()`` and ``get_all_reported_checkpoints()`` take. Below the session, which
holds a ``TrainContext``; they import nothing of trainkit."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class CheckpointUploadMode(enum.Enum):
    """How ``report()`` moves a checkpoint into storage.

    SYNC: upload before ``report()`` returns. ASYNC: upload in a background thread and return at
    once (an upload error is raised by the next ``report()`` or when the function returns).
    NO_UPLOAD: the checkpoint's directory is already inside the run directory; only register it.
    """

    SYNC = "SYNC"
    ASYNC = "ASYNC"
    NO_UPLOAD = "NO_UPLOAD"


class CheckpointConsistencyMode(enum.Enum):
    """What ``get_all_reported_checkpoints`` waits for (Ray Train's name).

    COMMITTED: every checkpoint this rank reported is committed. VALIDATED (Ray's default): the same
    in trainkit, which does not hold workers for validations: a checkpoint whose validation is
    still running comes back with status ``PENDING_VALIDATION`` (its scores land in
    ``Result.best_checkpoints``).
    """

    COMMITTED = "COMMITTED"
    VALIDATED = "VALIDATED"


@dataclass(frozen=True)
class PreemptionInfo:
    """An imminent preemption (Ray Train's type), from ``get_preemption_info()``.

    Attributes:
        deadline_ms: the earliest deadline of the preempted nodes, UNIX time in milliseconds; None
            when none was given (a drain without a deadline).
        preempted_node_to_ranks: each preempted node's id to the world ranks it takes away.
    """

    deadline_ms: int | None
    preempted_node_to_ranks: dict[str, list[int]]

    @property
    def preempted_node_ids(self) -> list[str]:
        return sorted(self.preempted_node_to_ranks)

    @property
    def preempted_ranks(self) -> list[int]:
        return sorted({rank for ranks in self.preempted_node_to_ranks.values() for rank in ranks})


@dataclass(frozen=True)
class TrainContext:
    """Where this worker stands in the run. Get it with ``trainkit.get_context()``."""

    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    experiment_name: str
    attempt: int
    storage: Any = None

    def get_world_rank(self) -> int:
        return self.world_rank

    def get_world_size(self) -> int:
        return self.world_size

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_local_world_size(self) -> int:
        return self.local_world_size

    def get_node_rank(self) -> int:
        return self.node_rank

    def get_experiment_name(self) -> str:
        return self.experiment_name

    def get_attempt(self) -> int:
        """0 for the first attempt, incremented at each restart after a failure."""
        return self.attempt

    def get_storage(self) -> Any:
        """The run's storage: ``.fs`` (a ``pyarrow.fs.FileSystem``) and ``.run_path``."""
        return self.storage
