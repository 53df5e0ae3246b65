"""Messages a worker sends to the driver, drained by the driver's long-poll."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainkit._internal.storage.run_storage import FileEntry


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
