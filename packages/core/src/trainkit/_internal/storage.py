"""The run directory on any ``pyarrow.fs`` filesystem, and the checkpoint commit protocol.

Layout of ``<storage_path>/<name>/``::

    run_state.json            driver state, replaced atomically (previous copy: run_state.json.prev)
    metrics.jsonl             one line per consolidated report
    checkpoint_000003/        committed checkpoint: the ranks' files + .manifest.json
    .tmp-checkpoint_000004-1/ being written by attempt 1; never loaded, swept on start

A checkpoint is committed by writing its manifest (every file's size and sha256) into the
temporary directory and renaming that directory into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pyarrow.fs as pafs

from trainkit._internal.naming import validate_name

MANIFEST = ".manifest.json"
METADATA = ".metadata.json"
STATE = "run_state.json"
METRICS = "metrics.jsonl"
TMP_PREFIX = ".tmp-"
_CHUNK = 8 << 20
_UNHASHED = {MANIFEST, METADATA}  # manifest can't hash itself; metadata stays editable


def default_storage_path() -> str:
    return os.environ.get("TRAINKIT_STORAGE_PATH") or str(Path("~/trainkit_results").expanduser())


def resolve_filesystem(path: str, filesystem: pafs.FileSystem | None = None) -> tuple[pafs.FileSystem, str]:
    """Return ``(filesystem, path inside it)`` for a local path or URI."""
    if filesystem is not None:
        return filesystem, path
    if "://" not in path:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))
    return pafs.FileSystem.from_uri(path)


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, posix
    size: int
    sha256: str


def _walk_local(root: str) -> Iterable[tuple[str, str]]:
    """(absolute path, relative posix path) of every regular file under ``root``."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for filename in sorted(filenames):
            absolute = os.path.join(dirpath, filename)
            yield absolute, Path(os.path.relpath(absolute, root)).as_posix()


def upload_dir(local_dir: str, fs: pafs.FileSystem, dest: str) -> list[FileEntry]:
    """Copy every file of ``local_dir`` into ``dest`` on ``fs``, hashing as it goes."""
    if not os.path.isdir(local_dir):
        raise ValueError(f"checkpoint directory {local_dir!r} does not exist or is not a directory")
    entries = []
    fs.create_dir(dest, recursive=True)
    for absolute, rel in _walk_local(local_dir):
        if rel == MANIFEST:  # a manifest copied from another checkpoint is not ours
            continue
        target = posixpath.join(dest, rel)
        parent = posixpath.dirname(target)
        if parent != dest:
            fs.create_dir(parent, recursive=True)
        digest = hashlib.sha256()
        size = 0
        with open(absolute, "rb") as src, fs.open_output_stream(target) as out:
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
        if rel not in _UNHASHED:
            entries.append(FileEntry(rel, size, digest.hexdigest()))
    return entries


def download_dir(fs: pafs.FileSystem, src: str, local_dir: str) -> None:
    os.makedirs(local_dir, exist_ok=True)
    if is_local(fs):
        shutil.copytree(src, local_dir, dirs_exist_ok=True)
    else:
        pafs.copy_files(src, local_dir, source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())


class RunStorage:
    """One run's directory: paths, atomic state, metrics log and checkpoint commits."""

    def __init__(self, storage_path: str | None, name: str, filesystem: pafs.FileSystem | None = None):
        validate_name("name", name)
        self.name = name
        self.fs, self.root = resolve_filesystem(storage_path or default_storage_path(), filesystem)
        self.run_path = posixpath.join(self.root.rstrip("/"), name)

    def __repr__(self) -> str:
        return f"RunStorage({self.run_path!r})"

    # -- paths ---------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return posixpath.join(self.run_path, *parts)

    def tmp_checkpoint_path(self, checkpoint_name: str, attempt: int) -> str:
        validate_name("checkpoint_dir_name", checkpoint_name)
        return self.path(f"{TMP_PREFIX}{checkpoint_name}-{attempt}")

    # -- plain files ---------------------------------------------------------------------------
    def ensure_run_dir(self) -> None:
        self.fs.create_dir(self.run_path, recursive=True)

    def exists(self, *parts: str) -> bool:
        return self.fs.get_file_info(self.path(*parts)).type != pafs.FileType.NotFound

    def read_text(self, *parts: str) -> str | None:
        try:
            with self.fs.open_input_stream(self.path(*parts)) as f:
                return f.read().decode()
        except FileNotFoundError:
            return None

    def write_json_atomic(self, name: str, obj: Any) -> None:
        """Replace ``name`` atomically, keeping the previous version as ``name.prev``."""
        data = json.dumps(obj, indent=1, sort_keys=True).encode()
        final, tmp, prev = self.path(name), self.path(f"{TMP_PREFIX}{name}"), self.path(f"{name}.prev")
        if is_local(self.fs):
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if os.path.exists(final):
                os.replace(final, prev)
            os.replace(tmp, final)
            _fsync_dir(self.run_path)
            return
        with self.fs.open_output_stream(tmp) as f:
            f.write(data)
        if self.exists(name):
            self.fs.copy_file(final, prev)
        self.fs.move(tmp, final)

    def append_line(self, name: str, line: str) -> None:
        target = self.path(name)
        if is_local(self.fs):
            with open(target, "a", encoding="utf-8") as f:
                f.write(line + "\n")
            return
        existing = self.read_text(name) or ""  # object stores cannot append
        with self.fs.open_output_stream(target) as f:
            f.write((existing + line + "\n").encode())

    # -- checkpoints ---------------------------------------------------------------------------
    def commit_checkpoint(self, tmp_path: str, checkpoint_name: str, files: Iterable[FileEntry]) -> str:
        """Write the manifest into ``tmp_path`` and rename it to ``checkpoint_name``."""
        final = self.path(validate_name("checkpoint_dir_name", checkpoint_name))
        manifest = {"format": 1, "files": {e.path: {"size": e.size, "sha256": e.sha256}
                                           for e in sorted(files, key=lambda e: e.path)}}
        self.fs.create_dir(tmp_path, recursive=True)
        with self.fs.open_output_stream(posixpath.join(tmp_path, MANIFEST)) as f:
            f.write(json.dumps(manifest, indent=1).encode())
        if self.fs.get_file_info(final).type != pafs.FileType.NotFound:
            self.fs.delete_dir(final)  # an orphan from a crash between rename and state write
        self.fs.move(tmp_path, final)
        return final

    def delete_dir(self, path: str) -> None:
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass

    def sweep_tmp(self) -> list[str]:
        """Delete temporary checkpoint directories left by earlier attempts."""
        swept = []
        selector = pafs.FileSelector(self.run_path, allow_not_found=True)
        for info in self.fs.get_file_info(selector):
            if info.base_name.startswith(TMP_PREFIX) and info.type == pafs.FileType.Directory:
                self.delete_dir(info.path)
                swept.append(info.base_name)
        return swept


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hash_tree(fs: pafs.FileSystem, root: str) -> list[FileEntry]:
    """Size and sha256 of every file under ``root`` on ``fs`` (for files uploaded by someone else)."""
    entries = []
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        rel = posixpath.relpath(info.path, root)
        if info.type != pafs.FileType.File or rel in _UNHASHED:
            continue
        digest = hashlib.sha256()
        with fs.open_input_stream(info.path) as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
        entries.append(FileEntry(rel, info.size, digest.hexdigest()))
    return entries
