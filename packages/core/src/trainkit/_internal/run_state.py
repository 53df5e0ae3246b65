"""``run_state.json``: the driver's durable record of a run (JSON only, never pickles)."""

from __future__ import annotations

import json
import logging
import math
import posixpath
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from trainkit._internal import storage as storage_mod
from trainkit._internal import strict_json
from trainkit.checkpoint import Checkpoint
from trainkit.config import CheckpointConfig

if TYPE_CHECKING:
    import pyarrow.fs as pafs

logger = logging.getLogger("trainkit")
FORMAT = 1


START_PHASES = ("ray_start", "placement", "actors", "setup", "backend", "launch", "first_report", "framework_import")


def start_profile(marks: dict[str, float], import_s: list[float], ray_start_s: float | None) -> dict[str, float]:
    """Seconds spent in each phase of an attempt's start: ``ray_start`` (connecting to or starting
    Ray; the first attempt of a ``fit()`` only), then one phase per ``time.monotonic()`` mark, taken
    in order as each ends (the first mark is the attempt's begin): placement, actors (their
    processes up), setup, backend (e.g. the process group), launch (the training function
    started), first_report. ``framework_import`` (the slowest worker's prewarm import) overlaps the
    phases from actors to backend."""
    names, times = list(marks), list(marks.values())
    profile = {} if ray_start_s is None else {"ray_start": round(ray_start_s, 4)}
    profile.update((names[i], round(times[i] - times[i - 1], 4)) for i in range(1, len(names)))
    if import_s:
        profile["framework_import"] = round(max(import_s), 4)
    return profile


def _driver_gone(fs: "pafs.FileSystem", run_path: str) -> str | None:
    """Why the run's driver counts as gone, if it does: its lease's (the run lock's) heartbeat is
    older than ``lock.STALE_S``, or the lease is gone (a driver that ends releases it only after
    its last state write)."""
    from trainkit._internal import lock

    try:
        with fs.open_input_stream(posixpath.join(run_path, lock.LOCK)) as f:
            lease = json.loads(f.read().decode())
    except FileNotFoundError:
        return "its lease is gone"
    except (OSError, ValueError):
        return None  # torn mid-write or unreadable: the driver may well be alive
    silent_s = lock.heartbeat_age_s(lease) if isinstance(lease, dict) else None
    if silent_s is None:
        return None
    return f"no heartbeat for {silent_s:.0f} s" if silent_s > lock.STALE_S else None


@dataclass
class CheckpointRecord:
    name: str
    index: int
    attempt: int
    metrics: dict[str, Any]


@dataclass
class RunState:
    name: str
    status: str = "running"  # running | finished | failed | interrupted (Ctrl-C, or its driver died)
    backend: str = ""
    num_workers: int = 0
    attempt: int = 0
    next_report_index: int = 0
    checkpoints: list[CheckpointRecord] = field(default_factory=list)
    latest_checkpoint: str | None = None
    last_metrics: dict[str, Any] | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    world_sizes: list[int] = field(default_factory=list)  # each attempt's workers (elastic runs resize)
    start_profile: dict[str, float] = field(default_factory=dict)  # the latest attempt's: start_profile()
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    error: str | None = None
    format: int = FORMAT

    # -- persistence -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RunState":
        data = dict(data)
        data["checkpoints"] = [CheckpointRecord(**c) for c in data.get("checkpoints", [])]
        return cls(**data)

    def save(self, storage: storage_mod.RunStorage) -> None:
        self.updated = time.time()
        storage.write_json_atomic(storage_mod.STATE, self.to_json())

    @classmethod
    def load(cls, fs: "pafs.FileSystem", run_path: str) -> "RunState | None":
        """The state, falling back to the previous copy when the current one is torn or corrupt. A
        "running" run whose driver is gone reads as "interrupted"."""
        for name in (storage_mod.STATE, storage_mod.STATE + ".prev"):
            try:
                with fs.open_input_stream(posixpath.join(run_path, name)) as f:
                    state = cls.from_json(strict_json.loads(f.read()))
                if state.status == "running" and (gone := _driver_gone(fs, run_path)):
                    state.status, state.error = "interrupted", f"its driver stopped without finishing the run ({gone})"
                return state
            except FileNotFoundError:
                continue
            except (ValueError, TypeError, KeyError) as exc:
                logger.warning("trainkit: %s in %s is unreadable (%s); trying the previous copy", name, run_path, exc)
        return None

    @classmethod
    def recover(cls, storage: storage_mod.RunStorage) -> "RunState | None":
        """The state, reconciled with the committed checkpoints on disk (their manifests are the
        truth): adopts commits the state missed (a crash before its write, or a fall back to the
        previous copy), forgets records whose directory is gone. None for a new run."""
        state = cls.load(storage.fs, storage.run_path)
        storage.sweep(c.name for c in (state.checkpoints if state else []))  # finishes an interrupted replace
        committed = storage.committed_checkpoints()
        if state is None and not committed:
            return None
        if state is None:
            logger.warning("trainkit: no readable run state in %s; rebuilt it from %d committed checkpoint(s)",
                           storage.run_path, len(committed))
            state = cls(storage.name)
        on_disk = {m["name"]: m for m in committed}
        state.checkpoints = [c for c in state.checkpoints if c.name in on_disk and c.index == on_disk[c.name]["index"]]
        for m in committed:
            if m["name"] not in {c.name for c in state.checkpoints}:  # a commit the state missed
                state.checkpoints.append(CheckpointRecord(m["name"], m["index"], m.get("attempt", 0), m.get("metrics", {})))
        state.checkpoints.sort(key=lambda c: c.index)
        state.latest_checkpoint = state.checkpoints[-1].name if state.checkpoints else None
        if state.checkpoints:
            state.next_report_index = max(state.next_report_index, state.checkpoints[-1].index + 1)
        return state

    # -- checkpoints -----------------------------------------------------------------------------
    def add_checkpoint(self, record: CheckpointRecord) -> None:
        self.checkpoints = [c for c in self.checkpoints if c.name != record.name] + [record]
        self.latest_checkpoint = record.name

    def ranked(self, config: CheckpointConfig) -> list[CheckpointRecord]:
        """Best first: by the score attribute when set (missing/NaN last), else newest first."""
        attribute = config.checkpoint_score_attribute
        if attribute is None:
            return sorted(self.checkpoints, key=lambda c: c.index, reverse=True)

        def key(c: CheckpointRecord) -> tuple:
            value = c.metrics.get(attribute)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
                return (1, 0.0, -c.index)
            return (0, -value if config.checkpoint_score_order == "max" else value, -c.index)

        return sorted(self.checkpoints, key=key)

    def apply_retention(self, config: CheckpointConfig, protect: set[str]) -> list[CheckpointRecord]:
        """Drop records beyond ``num_to_keep`` (never the latest or a protected one); return them."""
        if config.num_to_keep is None:
            return []
        keep = {c.name for c in self.ranked(config)[: config.num_to_keep]}
        keep |= protect | {self.latest_checkpoint}
        dropped = [c for c in self.checkpoints if c.name not in keep]
        self.checkpoints = [c for c in self.checkpoints if c.name in keep]
        return dropped

    def to_result(self, fs: "pafs.FileSystem", run_path: str, config: CheckpointConfig | None = None,
                  error: BaseException | None = None, return_value: Any = None) -> Any:
        from trainkit.result import Result

        def checkpoint(name: str) -> Checkpoint:
            return Checkpoint(posixpath.join(run_path, name), fs)

        ordered = self.ranked(config) if config and config.checkpoint_score_attribute else \
            sorted(self.checkpoints, key=lambda c: c.index)
        return Result(
            metrics=self.last_metrics,
            checkpoint=checkpoint(self.latest_checkpoint) if self.latest_checkpoint else None,
            path=run_path,
            filesystem=fs,
            error=error,
            best_checkpoints=[(checkpoint(c.name), c.metrics) for c in ordered],
            return_value=return_value,
        )
