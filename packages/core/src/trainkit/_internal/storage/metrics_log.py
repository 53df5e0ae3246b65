"""The run's report log: one JSON line per consolidated report.

On a local or shared disk it is ``metrics.jsonl``, appended to. Object stores cannot append, so
there the log is a series of segments, ``metrics.jsonl.d/<first index>.jsonl``, each rewritten
whole per report until it holds ``SEGMENT_LINES`` lines: a report costs one small PUT however long
the run. Readers take ``metrics.jsonl`` and then the segments in order, and skip a line a crash
tore. A local write that fails (a full disk) is truncated back to the last whole line, and so is a
line a crash tore, before the next append. Lines are strict JSON (``strict_json``: NaN and
infinities tagged), readable by ``jq`` and any JSON Lines tool.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any

from trainkit._internal.storage import strict_json
from trainkit._internal.storage.retry import with_retries
from trainkit._internal.storage.run_storage import METRICS
from trainkit._internal.storage.checkpoint_files import list_dir, open_input
from trainkit._internal.storage.stores import store_of
from trainkit._internal.storage.untrusted import open_regular
from trainkit.errors import NotRegularFileError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from trainkit._internal.storage.run_storage import RunStorage

SEGMENTS = METRICS + ".d"
SEGMENT_LINES = 200


class MetricsLog:
    """Appends reports to one run's log (one writer: the driver). Lines wait in memory until
    ``flush()``: on an object store the reports the driver handles together cost one PUT."""

    def __init__(self, storage: "RunStorage"):
        self.storage = storage
        self._segment: str | None = None  # object stores: the segment being filled, and its lines
        self._lines: list[str] = []
        self._unwritten: list[tuple[int, str]] = []  # (index, line)

    def append(self, record: dict[str, Any]) -> None:
        self._unwritten.append((int(record["index"]), strict_json.dumps(record)))

    def flush(self) -> None:
        """Write what was appended; what a failed write left stays for the next flush."""
        if self._unwritten:
            self.storage.check_fence()
        while self._unwritten:
            self._unwritten = self._unwritten[self._write(self._unwritten):]

    def _write(self, unwritten: list[tuple[int, str]]) -> int:
        """Write the first of ``unwritten``: one line on a disk, what fits the open segment on an
        object store. Returns how many were written."""
        if self.storage.store.local_paths:
            target = self.storage.path(METRICS)
            with_retries("append", target, lambda: _append_local(target, unwritten[0][1]))
            return 1
        if self._segment is None or len(self._lines) >= SEGMENT_LINES:
            self._segment, self._lines = posixpath.join(SEGMENTS, f"{unwritten[0][0]:09d}.jsonl"), []
            folder = self.storage.path(SEGMENTS)  # some filesystems (HDFS, fsspec) need it to exist
            with_retries("create", folder, lambda: self.storage.fs.create_dir(folder, recursive=True))
        batch = [line for _, line in unwritten[:SEGMENT_LINES - len(self._lines)]]
        self.storage.write_text(self._segment, "".join(f"{x}\n" for x in self._lines + batch))
        self._lines += batch
        return len(batch)


def _append_local(target: str, line: str) -> None:
    """Append ``line``; a write that fails (a full disk, an I/O error) is undone, and a line a
    crash tore is cut off first: the file always ends with a whole line."""
    with open_regular(target, append=True) as f:  # never through a link; unbuffered: nothing left at close
        whole = _last_whole_line_end(f)
        if whole != f.seek(0, 2):
            f.truncate(whole)
        data = memoryview(line.encode() + b"\n")
        try:
            while data:
                data = data[f.write(data):]  # a full disk fails here, inside the retry wrapper
        except OSError:
            f.truncate(whole)
            raise


def _last_whole_line_end(f: Any, chunk: int = 1 << 16) -> int:
    """The offset just past the file's last newline (0 when it has none)."""
    position = f.seek(0, 2)
    if position == 0 or (f.seek(-1, 2), f.read(1))[1] == b"\n":  # the common case: one byte read
        return position
    while position > 0:
        start = max(0, position - chunk)
        f.seek(start)
        data = f.read(position - start)
        if (cut := data.rfind(b"\n")) >= 0:
            return start + cut + 1
        position = start
    return 0


def _log_paths(fs: "pafs.FileSystem", run_path: str) -> list[str]:
    segments = list_dir(fs, posixpath.join(run_path, SEGMENTS))  # no links followed
    return [posixpath.join(run_path, METRICS), *sorted(info.path for info in segments if info.base_name.endswith(".jsonl"))]


def _record(line: str | bytes) -> dict[str, Any] | None:
    try:
        record = strict_json.loads(line)
    except ValueError:
        return None  # torn by a crash
    if isinstance(record, dict) and "index" in record and isinstance(record.get("metrics"), dict):
        return record
    return None


def read_metrics_log(fs: "pafs.FileSystem", run_path: str) -> list[dict[str, Any]]:
    """Every consolidated report of a run, in order; [] when there is none."""
    from trainkit._internal.display import warn

    records = []
    for path in _log_paths(fs, run_path):
        try:
            text = with_retries("read", path, lambda: _read(fs, path))
        except FileNotFoundError:
            continue
        except NotRegularFileError as exc:
            warn(f"{exc}; its reports are skipped")
            continue
        records += filter(None, map(_record, text.splitlines()))
    return records


def read_last_report(fs: "pafs.FileSystem", run_path: str) -> dict[str, Any] | None:
    """The run's last consolidated report, reading no more than its last lines; None when there is none."""
    for path in reversed(_log_paths(fs, run_path)):
        try:
            if store_of(fs).local_paths:
                with open_input(fs, path) as f:  # a regular file, never blocking
                    lines = _lines_backwards(f)
                    found = next(filter(None, map(_record, lines)), None)
            else:
                text = with_retries("read", path, lambda: _read(fs, path))
                found = next(filter(None, map(_record, reversed(text.splitlines()))), None)
        except OSError:  # missing, not a regular file, unreadable: the log's other files may still tell
            continue
        if found is not None:
            return found
    return None


def _lines_backwards(f: Any, chunk: int = 1 << 16) -> Any:
    """The lines of a binary file, last first, read from its end in chunks."""
    position, tail = f.seek(0, 2), b""
    while position > 0:
        start = max(0, position - chunk)
        f.seek(start)
        lines = (f.read(position - start) + tail).split(b"\n")
        tail, position = lines[0], start
        yield from reversed(lines[1:])
    yield tail


def _read(fs: "pafs.FileSystem", path: str) -> str:
    with open_input(fs, path) as f:
        return f.read().decode(errors="replace")
