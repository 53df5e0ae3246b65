"""Durable records of checkpoint reports, written by each rank before its ``report()`` returns.

A rank hands its reports to the driver through memory; a rank (or the driver) SIGKILLed before the
driver polled them would lose them. So a rank that reports a checkpoint also writes one small
record into the run directory once the checkpoint's files are in storage, before ``report()``
returns (SYNC) or before the report counts as delivered (ASYNC), like the per-process commit
markers of PyTorch DCP and Orbax::

    .reports/<attempt>-<driver id>/<index>.<rank>.json

When an attempt fails, the driver commits every report whose every rank left a record or sent its
event (``ReportLog.commit_recorded``); a driver that died is replaced by the next run of the same
name, which does the same for the last attempt before it sweeps. The sweep that follows either
deletes the records (``RunStorage.sweep``). Records are read back as untrusted
input: a record names only its own attempt's upload folder, and its files are hashed as stored.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainkit._internal.storage import strict_json
from trainkit._internal.storage.retry import with_retries
from trainkit._internal.storage.run_storage import REPORTS
from trainkit._internal.storage.checkpoint_files import FileEntry, list_dir, open_input
from trainkit._internal.storage.untrusted import stored_name, stored_relpath

if TYPE_CHECKING:
    from trainkit._internal.storage.run_storage import RunStorage

_RECORD = re.compile(r"(\d{6,})\.(\d{5,})\.json")


@dataclass
class Record:
    rank: int
    index: int
    world_size: int
    metrics: dict[str, Any]
    checkpoint_name: str
    tmp_path: str
    files: list[tuple[str, int, str | None]]  # (relative path, size, sha256 when the rank knew it)


def _folder(storage: "RunStorage", attempt: int, driver_id: str | None = None) -> str:
    return storage.path(REPORTS, f"{attempt}-{driver_id or storage.driver_id}")


def write(storage: "RunStorage", attempt: int, record: Record) -> None:
    """Store ``record``: one PUT on an object store."""
    folder = _folder(storage, attempt)
    target = posixpath.join(folder, f"{record.index:06d}.{record.rank:05d}.json")
    data = strict_json.dumps({"format": 1, **record.__dict__}, separators=(",", ":")).encode()

    def put() -> None:
        try:
            stream = storage.fs.open_output_stream(target)
        except FileNotFoundError:  # the attempt's first record on a disk (object stores need no folders)
            storage.fs.create_dir(folder, recursive=True)
            stream = storage.fs.open_output_stream(target)
        with stream:
            stream.write(data)

    with_retries("write report record", target, put)


def read(storage: "RunStorage", attempt: int, from_index: int) -> list[Record]:
    """The records of ``attempt`` (any driver's) for reports ``from_index`` on, each checked."""
    records = []
    for folder in _attempt_folders(storage, attempt):
        for info in with_retries("list", folder.path, lambda: list_dir(storage.fs, folder.path)):
            match = _RECORD.fullmatch(info.base_name)
            if match is None or int(match.group(1)) < from_index:
                continue
            record = _load(storage, attempt, folder.base_name.split("-", 1)[1], info.path)
            if record is not None and (record.index, record.rank) == (int(match.group(1)), int(match.group(2))):
                records.append(record)
    return records


def _attempt_folders(storage: "RunStorage", attempt: int) -> list[Any]:
    import pyarrow.fs as pafs

    root = storage.path(REPORTS)
    return [info for info in with_retries("list", root, lambda: list_dir(storage.fs, root))
            if info.type == pafs.FileType.Directory and info.base_name.startswith(f"{attempt}-")]


def _load(storage: "RunStorage", attempt: int, driver_id: str, path: str) -> Record | None:
    """The record at ``path``, or None when it is torn or names anything but its own upload folder."""
    try:
        with open_input(storage.fs, path) as f:
            data = strict_json.loads(f.read())
        record = Record(int(data["rank"]), int(data["index"]), int(data["world_size"]), dict(data["metrics"]),
                        data["checkpoint_name"], data["tmp_path"],
                        [(rel, int(size), sha) for rel, size, sha in data["files"]])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if stored_name(path, "checkpoint_name", record.checkpoint_name) is None:
        return None
    uploads = {storage.tmp_checkpoint_path(record.checkpoint_name, attempt, record.index),
               storage.path(record.checkpoint_name, f".attempt-{attempt}-{driver_id}")}
    if record.tmp_path not in uploads or not all(stored_relpath(path, "files", rel) for rel, _, _ in record.files):
        return None
    return record


def stored_files(storage: "RunStorage", record: Record) -> list[FileEntry] | None:
    """The record's files as stored (hashed here where the rank did not hash them); None when one is missing."""
    from trainkit._internal.storage.checkpoint_files import hash_file

    entries = []
    for rel, size, sha in record.files:
        path = posixpath.join(record.tmp_path, rel)
        try:
            if sha is None:
                entries.append(hash_file(storage.fs, record.tmp_path, rel))
            elif storage.fs.get_file_info(path).size == size:
                entries.append(FileEntry(rel, size, sha))
            else:
                return None
        except OSError:
            return None
    return entries
