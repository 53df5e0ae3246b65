"""``run_state.json``: the driver's durable record of a run (JSON only, never pickles)."""

from __future__ import annotations

import json
import logging
import math
import posixpath
import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

from trainkit._internal.storage import checkpoint_files
from trainkit._internal.storage import run_storage as storage_mod
from trainkit._internal.storage import strict_json
from trainkit._internal.storage.metrics_log import read_last_report
from trainkit._internal.storage.untrusted import stored_name
from trainkit._internal.terminal import terminal_safe
from trainkit.config import CheckpointConfig
from trainkit.errors import NotRegularFileError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

logger = logging.getLogger("trainkit")
# 2: no metrics (a checkpoint's live in its manifest, the last report's in metrics.jsonl); 1's still read
FORMAT = 2


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
    """Why the run's driver counts as gone, if it does: its lease (the run lock) names a process of
    this host that no longer exists (``lock.lease_alive``; another host's driver counts as alive), or
    the lease is gone (a driver that ends releases it only after its last state write)."""
    from trainkit._internal.storage import lock

    try:
        with checkpoint_files.open_input(fs, posixpath.join(run_path, lock.LOCK)) as f:
            lease = json.loads(f.read().decode())
    except FileNotFoundError:
        return "its lease is gone"
    except (OSError, ValueError):
        return None  # torn mid-write or unreadable: the driver may well be alive
    if not isinstance(lease, dict) or lock.lease_alive(lease):
        return None
    if "started" not in lease:  # an older trainkit's lease: its heartbeat is all there is
        return f"no heartbeat for {lock.heartbeat_age_s(lease) or 0:.0f} s"
    return f"its process (pid {lease.get('pid')} on this host) is gone"


@dataclass
class CheckpointRecord:
    """A committed checkpoint. Its reported metrics live once, in its manifest: run_state.json holds
    only ``score`` (the value ranking needs) and what a validation added, so its size does not grow
    with the metrics (bench P13). ``metrics`` None: not read from the manifest yet."""

    name: str
    index: int
    attempt: int
    metrics: dict[str, Any] | None = None  # reported, merged with ``validation``
    score: float | None = None  # the value of the run's checkpoint_score_attribute (None: missing or NaN)
    validation: dict[str, Any] | None = None  # the metrics its validation added

    def to_json(self, attribute: str | None) -> dict[str, Any]:
        if self.metrics is not None:
            value = self.metrics.get(attribute) if attribute else None
            self.score = value if is_score(value) else None
        record = {"name": self.name, "index": self.index, "attempt": self.attempt, "score": self.score}
        return {**record, "validation": self.validation} if self.validation else record

    def fill_metrics(self, manifest: dict[str, Any] | None) -> None:
        reported = manifest.get("metrics") if manifest else None
        self.metrics = {**(reported if isinstance(reported, dict) else {}), **(self.validation or {})}


def is_score(value: Any) -> bool:
    """A value ranking can use: a number, not NaN (NaN and missing values rank last)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


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
    # what the run ranks checkpoints by (its latest fit's CheckpointConfig): every reader's "best"
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: str = "max"
    last_metrics: dict[str, Any] | None = None  # not in run_state.json (format 2): metrics.jsonl's last line
    failures: list[dict[str, Any]] = field(default_factory=list)
    world_sizes: list[int] = field(default_factory=list)  # each attempt's workers (elastic runs resize)
    start_profile: dict[str, float] = field(default_factory=dict)  # the latest attempt's: start_profile()
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    error: str | None = None
    format: int = FORMAT
    saved_at: ClassVar[float] = -math.inf  # time.monotonic() of this process's last save (wall-clock steps move ``updated``)

    # -- persistence -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        # shallow: asdict() would deep-copy every checkpoint's metrics only to drop them
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "last_metrics"}
        data["checkpoints"] = [c.to_json(self.checkpoint_score_attribute) for c in self.checkpoints]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RunState":
        data = dict(data)
        data["checkpoints"] = [CheckpointRecord(**c) for c in data.get("checkpoints", [])]  # format 1: with metrics
        return cls(**data)

    def fill_checkpoint_metrics(self, fs: "pafs.FileSystem", run_path: str) -> None:
        """Read the metrics of the checkpoints that lack them from their manifests."""
        for c in self.checkpoints:
            if c.metrics is None:
                c.fill_metrics(checkpoint_files.read_manifest(fs, posixpath.join(run_path, c.name)))

    def score_config(self) -> CheckpointConfig:
        """The ranking the run recorded (no attribute: newest first)."""
        return CheckpointConfig(checkpoint_score_attribute=self.checkpoint_score_attribute,
                                checkpoint_score_order=self.checkpoint_score_order)

    def save(self, storage: storage_mod.RunStorage) -> None:
        self.updated, self.saved_at = time.time(), time.monotonic()
        storage.write_json_atomic(storage_mod.STATE, self.to_json())

    @classmethod
    def load(cls, fs: "pafs.FileSystem", run_path: str) -> "RunState | None":
        """The state, falling back to the previous copy when the current one is torn or corrupt. A
        "running" run whose driver is gone reads as "interrupted"."""
        for name in (storage_mod.STATE, storage_mod.STATE + ".prev"):
            try:
                with checkpoint_files.open_input(fs, posixpath.join(run_path, name)) as f:
                    state = cls.from_json(strict_json.loads(f.read()))
                state.drop_unsafe_names(posixpath.join(run_path, name))
                if state.last_metrics is None and (last := read_last_report(fs, run_path)) is not None:
                    state.last_metrics = last["metrics"]
                if state.status == "running" and (gone := _driver_gone(fs, run_path)):
                    state.status, state.error = "interrupted", f"its driver stopped without finishing the run ({gone})"
                return state
            except FileNotFoundError:
                continue
            except (NotRegularFileError, ValueError, TypeError, KeyError) as exc:
                logger.warning("trainkit: %s in %s is unreadable (%s); trying the previous copy", name, run_path,
                               terminal_safe(exc))  # a TypeError names a key read from the file
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
        for c in state.checkpoints:
            if c.metrics is None:
                c.fill_metrics(on_disk[c.name])
        for m in committed:
            if m["name"] not in {c.name for c in state.checkpoints}:  # a commit the state missed
                record = CheckpointRecord(m["name"], m["index"], m.get("attempt", 0))
                record.fill_metrics(m)
                state.checkpoints.append(record)
        state.checkpoints.sort(key=lambda c: c.index)
        state.latest_checkpoint = state.checkpoints[-1].name if state.checkpoints else None
        if state.checkpoints:
            state.next_report_index = max(state.next_report_index, state.checkpoints[-1].index + 1)
        return state

    def drop_unsafe_names(self, source: str) -> None:
        """Forget checkpoint names read from ``source`` that are not plain names (``../victim``, an
        absolute path): each is refused with a warning, so no move or delete ever reaches them."""
        self.checkpoints = [c for i, c in enumerate(self.checkpoints)
                            if stored_name(source, f"checkpoints[{i}].name", c.name) is not None]
        if self.latest_checkpoint is not None and stored_name(source, "latest_checkpoint", self.latest_checkpoint) is None:
            self.latest_checkpoint = None

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
            if c.metrics is not None:
                value = c.metrics.get(attribute)
            else:  # metrics not read: the recorded score serves the recorded attribute
                value = c.score if attribute == self.checkpoint_score_attribute else None
            if not is_score(value):
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
