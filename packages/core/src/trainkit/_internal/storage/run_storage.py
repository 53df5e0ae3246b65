"""The run directory on any ``pyarrow.fs`` filesystem, and the checkpoint commit protocol.

Layout of ``<storage_path>/<name>/``::

    run_state.json            driver state, replaced atomically (previous copy: run_state.json.prev)
    metrics.jsonl             one line per consolidated report
    .lock                     lease of the driver running this run
    checkpoint_000003/        committed: the ranks' files + .manifest.json (sizes, sha256, report)
    .tmp-checkpoint_000004-1/ being written by attempt 1; never loaded, swept on start
    .reports/                 the ranks' records of checkpoint reports (report_records), swept on start

Commit: every rank writes into the temporary directory; the driver writes the manifest and then
renames the directory into place (local and shared filesystems). Object stores cannot rename a
directory, so there the files are copied into place and the manifest is written last: a
checkpoint directory without a manifest is never loaded and is swept. A default-named checkpoint
(``checkpoint_000004``) that is not in storage yet skips the copy on object stores: the ranks upload
straight into it, into a folder of their attempt's own (``checkpoint_000004/.attempt-1-<driver>/``),
and the commit is the manifest alone, naming that folder (``"data"``; ``upload_path``).

Fencing: no write of an earlier attempt lands in a committed checkpoint. Every rank writes only
below a name of its own attempt (a temporary directory, or that attempt's folder), and a commit
names exactly one attempt's files: a rank cut off from the cluster that finishes its upload after
a later attempt committed the same checkpoint writes next to it, never over it. Readers go through
the manifest (``files_root``); the next sweep deletes what such a rank left (``sweep``).

What differs between a local disk and an object store lives in ``stores.py`` (``self.store``).
pyarrow is imported lazily, so ``import trainkit`` stays light.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from trainkit._internal import faults
from trainkit._internal.interface import field_label
from trainkit._internal.naming import validate_name
from trainkit._internal.redact import redact
from trainkit._internal.storage import strict_json
from trainkit._internal.storage.checkpoint_files import (ATTEMPT_DIR, FileEntry, dump_manifest, file_type, list_dir,
                                                        open_input, read_manifest, verify_checkpoint)
from trainkit._internal.storage.retry import with_retries
from trainkit._internal.storage.stores import MANIFEST, TMP_PREFIX, exists, store_of
from trainkit.errors import CheckpointCorruptError, StorageError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

STATE = "run_state.json"
METRICS = "metrics.jsonl"
PROBES = 3  # preflight round trips, each of which the run's driver may sweep away
DEBRIS_RETRY_S = (0.1, 0.5)  # a sweep tries a folder a late writer keeps filling again after these
QUARANTINE = ".quarantine"  # checkpoints with a damaged manifest, kept for the user
REPORTS = ".reports"  # the ranks' durable records of reports (report_records), swept once committed
_CHECKPOINT_DIR = re.compile(r"checkpoint_\d+")


def default_storage_path() -> str:
    return os.environ.get("TRAINKIT_STORAGE_PATH") or str(Path("~/trainkit_results").expanduser())


def resolve_filesystem(path: str, filesystem: "pafs.FileSystem | None" = None) -> "tuple[pafs.FileSystem, str]":
    """Return ``(filesystem, path inside it)`` for a local path or URI."""
    import pyarrow.fs as pafs

    if filesystem is not None:
        return filesystem, path
    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))
    try:
        return pafs.FileSystem.from_uri(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow echoes the URI, credentials included
        raise ValueError(f"{field_label('storage_path')}={redact(path)!r} is invalid: {redact(str(exc))}") from None


class RunStorage:
    """One run's directory: paths, atomic state, metrics log, checkpoint commits and sweeping."""

    def __init__(self, storage_path: str | None, name: str, filesystem: "pafs.FileSystem | None" = None):
        validate_name("name", name)
        self.name = name
        self.fs, self.root = resolve_filesystem(storage_path or default_storage_path(), filesystem)
        self.run_path = posixpath.join(self.root.rstrip("/"), name)
        self.store = store_of(self.fs)  # the kind of filesystem (stores.py): decided once
        # Directories in the run directory after the last sweep (None: not swept yet), travelling
        # with this object to the workers: where an upload in place must not go.
        self.swept_dirs: frozenset[str] | None = None
        self.driver_id = uuid.uuid4().hex[:8]  # this driver's, in the names its attempts upload to
        # The driver's lease check (RunLock.check): raises once this driver may no longer write the
        # run; called before every commit, state write, metrics flush and delete. Never pickled.
        self.fence: "Callable[[], None] | None" = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "fence": None}  # a worker holds no lease

    def check_fence(self) -> None:
        if self.fence is not None:
            self.fence()

    def __repr__(self) -> str:
        return f"RunStorage({redact(self.run_path)!r})"

    # -- paths ---------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return posixpath.join(self.run_path, *parts)

    def tmp_checkpoint_path(self, checkpoint_name: str, attempt: int, index: int) -> str:
        """Where report ``index`` of ``attempt`` uploads: unique even when a name is reported again."""
        validate_name("checkpoint_dir_name", checkpoint_name)
        return self.path(f"{TMP_PREFIX}{checkpoint_name}-{attempt}-{index}")

    def upload_path(self, checkpoint_name: str, attempt: int, index: int, reused: bool) -> str:
        """Where the ranks upload report ``index``'s checkpoint: its temporary directory, or on an
        object store (which would copy every byte again at the commit) this attempt's own folder in
        the checkpoint's place when no committed checkpoint can be there: a default name (``sweep``
        deletes such a directory left without a manifest by a crash) that the last sweep did not
        find and that no earlier report of this attempt took (``reused``). The manifest, written
        last by the commit, makes it one and names the folder: another attempt's ranks, late, write
        only into folders of their own (the fence)."""
        if (not self.store.uploads_in_place or reused or self.swept_dirs is None or checkpoint_name in self.swept_dirs
                or not _CHECKPOINT_DIR.fullmatch(checkpoint_name)):
            return self.tmp_checkpoint_path(checkpoint_name, attempt, index)
        return self.path(checkpoint_name, f".attempt-{attempt}-{self.driver_id}")

    # -- plain files ---------------------------------------------------------------------------
    def preflight(self) -> None:
        """Create the run directory and prove it writable and readable, before any worker starts."""
        self.store.check_run_dir(self.root, self.run_path)

        def probe_round_trip() -> None:
            self.fs.create_dir(self.run_path, recursive=True)
            for _ in range(PROBES):  # a driver running this run sweeps probes: one may vanish under us
                probe = self.path(f"{TMP_PREFIX}probe-{uuid.uuid4().hex}")
                with self.fs.open_output_stream(probe) as f:
                    f.write(b"trainkit")
                try:
                    with self.fs.open_input_stream(probe) as f:
                        data = f.read()
                except FileNotFoundError:
                    continue  # written, then swept: try another
                if data != b"trainkit":
                    raise OSError(f"read back different bytes from {probe}")
                with contextlib.suppress(FileNotFoundError):
                    self.fs.delete_file(probe)
                return
            # each probe was written and then swept by the run's driver: writable, and its lock tells the rest

        with_retries("preflight of storage", redact(self.run_path), probe_round_trip)

    def exists(self, *parts: str) -> bool:
        return exists(self.fs, self.path(*parts))

    def read_text(self, *parts: str) -> str | None:
        def read() -> str:
            with open_input(self.fs, self.path(*parts)) as f:
                return f.read().decode()

        try:
            return with_retries("read", self.path(*parts), read)
        except FileNotFoundError:
            return None

    def write_text(self, name: str, text: str) -> None:
        """Replace ``name`` whole: a reader sees the old text or the new, never a part of it."""
        target = self.path(name)
        with_retries("write", target, lambda: self.store.replace(self.fs, target, text.encode()))

    def delete_file(self, name: str) -> None:
        try:
            with_retries("delete", self.path(name), lambda: self.fs.delete_file(self.path(name)))
        except FileNotFoundError:
            pass

    def write_json_atomic(self, name: str, obj: Any) -> None:
        """Replace ``name`` atomically, keeping the previous version as ``name.prev``."""
        self.check_fence()
        data = strict_json.dumps(obj, indent=1, sort_keys=True).encode()
        final = self.path(name)
        with_retries("write", final, lambda: self.store.replace(self.fs, final, data, prev=self.path(f"{name}.prev")))

    # -- checkpoints ---------------------------------------------------------------------------
    def commit_checkpoint(self, tmp_path: str, checkpoint_name: str, files: Iterable[FileEntry],
                          report: dict[str, Any]) -> str:
        """Make ``tmp_path`` the committed checkpoint ``checkpoint_name``; return its path.

        ``report`` (index, attempt, metrics) goes into the manifest, so a committed checkpoint
        describes itself even if the run state is lost. The manifest goes into ``tmp_path`` first:
        from then on the new checkpoint is whole, and a previous one of the same name is retired
        only once the new one is in place (a crash in between is rolled forward by ``sweep``).
        """
        self.check_fence()
        final = self.path(validate_name("checkpoint_dir_name", checkpoint_name))
        in_place = posixpath.dirname(tmp_path) == final  # an attempt's folder in it (upload_path)
        manifest = dump_manifest({"format": 1, "name": checkpoint_name, **report,
                                   **({"data": posixpath.basename(tmp_path)} if in_place else {}), "files": {
            e.path: {"size": e.size, "sha256": e.sha256} for e in sorted(files, key=lambda e: e.path)}})
        if in_place:  # the manifest, naming the folder, is the commit
            faults.point("before_commit", index=report.get("index"))
            with_retries("write manifest", final, lambda: self.write_manifest(final, manifest))
            return final
        with_retries("create", tmp_path, lambda: self.fs.create_dir(tmp_path, recursive=True))
        faults.point("before_commit", index=report.get("index"))
        with_retries("write manifest", tmp_path, lambda: self.write_manifest(tmp_path, manifest))
        faults.point("before_rename", index=report.get("index"))
        self.store.install(self, tmp_path, final, manifest)
        return final

    def write_manifest(self, directory: str, manifest: str) -> None:
        with self.fs.open_output_stream(posixpath.join(directory, MANIFEST)) as f:
            f.write(manifest.encode())

    def entries(self, path: str, recursive: bool = False) -> list:
        """What is in the folder ``path`` of the run, links left out (``list_dir``)."""
        return with_retries("list", path, lambda: list_dir(self.fs, path, recursive, top_may_link=path == self.run_path))

    def committed_checkpoints(self) -> list[dict[str, Any]]:
        """Manifests of the checkpoint directories that were committed (no hash check)."""
        manifests = []
        for info in self.entries(self.run_path):
            if info.type == file_type().Directory and not info.base_name.startswith(TMP_PREFIX):
                manifest = read_manifest(self.fs, info.path)
                if manifest is not None and manifest.get("name") == info.base_name and "index" in manifest:
                    manifests.append(manifest)
        return sorted(manifests, key=lambda m: m["index"])

    def delete_dir(self, path: str) -> None:
        self.check_fence()
        try:
            self.store.delete_dir(self, path)
        except FileNotFoundError:
            pass

    def sweep(self, recorded: Iterable[str] = ()) -> list[str]:
        """Clear what crashes left behind; return the names removed or moved.

        Temporary directories, checkpoint directories never committed (no manifest) and the report
        records (``report_records``: a sweep comes after their commit) are deleted,
        and so are the attempt folders a committed checkpoint's manifest does not name (a late
        upload of another attempt: ``upload_path``).
        A temporary directory holding a whole checkpoint (its manifest verifies) whose name is in
        ``recorded`` while that checkpoint itself is missing or broken is rolled forward into place:
        the crash came while it replaced a checkpoint of the same name. A checkpoint whose manifest
        exists but cannot be read is moved to ``.quarantine/`` (its data may be intact), with a warning.
        """
        swept, entries = [], self.entries(self.run_path)
        recorded = set(recorded)
        for info in entries:
            if info.base_name == REPORTS and self._delete_debris(info.path):  # committed or of no use by now
                swept.append(info.base_name)
                continue
            if info.type != file_type().Directory:
                # a probe, a state or lease write a crash cut off (a heartbeat writing now beats again next time)
                if info.base_name.startswith(TMP_PREFIX):
                    self.delete_file(info.base_name)
                continue
            if info.base_name.startswith(TMP_PREFIX):
                continue
            if not _CHECKPOINT_DIR.fullmatch(info.base_name):
                continue
            manifest = read_manifest(self.fs, info.path)
            if manifest is not None:
                swept += self._sweep_other_attempts(info.path, manifest)
            elif exists(self.fs, posixpath.join(info.path, MANIFEST)):
                if quarantined := self._quarantine(info.path):
                    swept.append(quarantined)
            elif self._delete_debris(info.path):
                swept.append(info.base_name)
        swept += self._roll_forward([i.path for i in entries if i.type == file_type().Directory
                                     and i.base_name.startswith(TMP_PREFIX)], recorded)
        for info in entries:
            if (info.type == file_type().Directory and info.base_name.startswith(TMP_PREFIX) and exists(self.fs, info.path)
                    and self._delete_debris(info.path)):
                swept.append(info.base_name)
        self.swept_dirs = frozenset({i.base_name for i in entries if i.type == file_type().Directory} - set(swept)
                                    | set(recorded))  # rolled forward or not, a recorded name is taken
        return swept

    def _delete_debris(self, path: str) -> bool:
        """Delete a folder no manifest names; False when it is left for the next sweep: a rank of an
        earlier attempt (cut off, or not stopped yet) still adds files to it, so it cannot go yet.
        A late writer never fails the run that sweeps after it."""
        for retry_s in (*DEBRIS_RETRY_S, None):
            try:
                self.delete_dir(path)
                return True
            except StorageError as exc:
                if exc.errno != errno.ENOTEMPTY:
                    raise
                if retry_s is not None:
                    time.sleep(retry_s)
        from trainkit._internal.display import warn

        warn(f"{path} is still being written (a rank of an earlier attempt, cut off or still stopping); "
             "it is never loaded, and is left for the next sweep")
        return False

    def _sweep_other_attempts(self, checkpoint_path: str, manifest: dict[str, Any]) -> list[str]:
        """Delete the attempt folders in a committed checkpoint that its manifest does not name."""
        swept = []
        for info in self.entries(checkpoint_path):
            if (info.type == file_type().Directory and ATTEMPT_DIR.fullmatch(info.base_name)
                    and info.base_name != manifest.get("data") and self._delete_debris(info.path)):
                swept.append(posixpath.relpath(info.path, self.run_path))
        return swept

    def _roll_forward(self, tmp_dirs: list[str], recorded: set[str]) -> list[str]:
        newest: dict[str, tuple[int, str, dict]] = {}
        for path in tmp_dirs:
            manifest = read_manifest(self.fs, path)
            name = (manifest or {}).get("name")
            if name not in recorded:  # recorded names passed validate_name when they were reported
                continue
            try:
                verify_checkpoint(self.fs, path)
            except CheckpointCorruptError:
                continue
            if name not in newest or manifest.get("index", -1) > newest[name][0]:
                newest[name] = (manifest.get("index", -1), path, manifest)
        rolled = []
        for name, (_, path, manifest) in newest.items():
            try:
                verify_checkpoint(self.fs, self.path(name))
                continue  # the checkpoint in place is whole: nothing to finish
            except CheckpointCorruptError:
                pass
            self.store.install(self, path, self.path(name), dump_manifest(manifest))
            rolled.append(name)
        return rolled

    def _quarantine(self, path: str) -> str | None:
        """Move the checkpoint ``path`` into ``.quarantine/``; None (left in place, with a warning)
        when ``.quarantine`` is a link or not a directory."""
        from trainkit._internal.display import warn

        dest = posixpath.join(self.path(QUARANTINE), f"{posixpath.basename(path)}-{uuid.uuid4().hex[:8]}")
        try:
            self.store.move_dir(self, path, dest)
        except NotADirectoryError as exc:
            warn(f"{exc}; {path} (its {MANIFEST} is damaged) stays where it is, and nothing is moved through it")
            return None
        warn(f"{path}: its {MANIFEST} is damaged, so it cannot be verified or resumed from; its files "
             f"were moved to {dest} for you to inspect (trainkit never deletes them)")
        return posixpath.relpath(dest, self.run_path)
