"""A checkpoint's files on any ``pyarrow.fs`` filesystem: listing them, copying or uploading a
rank's directory while hashing each file (sha256), downloading, and the checkpoint's manifest
(read back as untrusted input, the root of its files, every file verified against it). The run
directory and the commit protocol around them are ``run_storage.py``'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import re
import shutil
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainkit._internal import faults
from trainkit._internal.redact import redact
from trainkit._internal.storage import strict_json
from trainkit._internal.storage.retry import with_retries
from trainkit._internal.storage.stores import MANIFEST, METADATA, store_of
from trainkit._internal.storage.untrusted import describe, stored_name, stored_relpath
from trainkit.errors import CheckpointCorruptError, LinkInCheckpointError, NotRegularFileError

if TYPE_CHECKING:
    import pyarrow.fs as pafs


_CHUNK = 8 << 20
_IN_FLIGHT = 32 << 20  # the most of a file an upload holds in memory at once (_copy_hashing)
_UNHASHED = {MANIFEST, METADATA}  # the manifest can't hash itself; metadata stays editable
ATTEMPT_DIR = re.compile(r"\.attempt-\d+-[0-9a-f]+")  # an attempt's files in a checkpoint (run_storage.upload_path)


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, posix
    size: int
    sha256: str


def open_input(fs: "pafs.FileSystem", path: str) -> Any:
    """A stream of the stored file ``path``: on a local disk only a regular file, opened so that a
    FIFO or device never blocks the reader (``NotRegularFileError`` instead)."""
    return store_of(fs).open_input(fs, path)


def list_dir(fs: "pafs.FileSystem", path: str, recursive: bool = False, top_may_link: bool = False) -> list:
    """The entries under ``path`` (none when it is missing), without symbolic links: on a local
    disk a link in a run directory (or ``path`` itself being one, unless ``top_may_link``: the run
    directory, which ``preflight`` checks) is never followed, moved or deleted; trainkit warns,
    naming it and its target, and leaves it alone."""
    return store_of(fs).list_dir(fs, path, recursive, top_may_link)


def local_files(root: str) -> list[tuple[str, str]]:
    """(absolute path, relative posix path) of every file under the reported directory ``root``,
    all of them regular files. The rule, the same on every store: a symbolic link (to a file or a
    directory) or a FIFO, socket or device in a reported checkpoint is refused with an error naming
    it (and a link's target) before anything is uploaded; trainkit never copies what a link points to."""
    if not os.path.isdir(root):
        raise ValueError(f"checkpoint directory {root!r} does not exist or is not a directory")
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for entry in sorted(dirnames) + sorted(filenames):
            absolute = os.path.join(dirpath, entry)
            mode = os.lstat(absolute).st_mode
            if os.path.islink(absolute):
                raise LinkInCheckpointError(
                    f"checkpoint directory {root}: {absolute} is a symbolic link to {os.readlink(absolute)}; "
                    "trainkit does not follow links in a reported checkpoint (copy the file in instead)")
            if entry in filenames and not stat.S_ISREG(mode):
                raise LinkInCheckpointError(f"checkpoint directory {root}: {absolute} is {describe(mode)}, "
                                            "not a regular file; a checkpoint holds regular files only")
            if entry in filenames:
                files.append((absolute, Path(os.path.relpath(absolute, root)).as_posix()))
    return files


def _copy_hashing(src: str, fs: "pafs.FileSystem", target: str) -> tuple[int, str]:
    """Copy the local file ``src`` to ``target`` on ``fs``; return its size and sha256.

    Memory stays bounded whatever the file's size: pyarrow's S3 stream (``background_writes``, the
    default) makes each 8 MiB write a multipart part uploaded in the background and copies it into
    a queue with no bound, so a file faster to read than to upload piled up in memory (rank 0 grew
    ~550 MiB over a 1.5 GiB checkpoint). ``flush()`` every ``_IN_FLIGHT`` bytes waits for the parts
    in flight; it uploads no part of its own (the parts stay 8 MiB, the last one excepted), and on
    other streams it only hands the bytes written so far on."""
    digest, size, unflushed = hashlib.sha256(), 0, 0
    with open(src, "rb") as f, fs.open_output_stream(target) as out:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
            unflushed += len(chunk)
            if unflushed >= _IN_FLIGHT:
                out.flush()
                unflushed = 0
    return size, digest.hexdigest()


def upload_dir(local_dir: str, fs: "pafs.FileSystem", dest: str, **where: int) -> list[FileEntry]:
    """Copy every file of ``local_dir`` into ``dest`` on ``fs``, hashing as it goes."""
    files = local_files(local_dir)
    entries = []
    with_retries("create", dest, lambda: fs.create_dir(dest, recursive=True))
    for absolute, rel in files:
        if rel == MANIFEST:  # a manifest copied from another checkpoint is not ours
            continue
        target = posixpath.join(dest, rel)
        faults.point("before_upload_file", **where)
        if posixpath.dirname(target) != dest:
            fs.create_dir(posixpath.dirname(target), recursive=True)
        size, sha = with_retries("upload", target, lambda: _copy_hashing(absolute, fs, target))
        if rel not in _UNHASHED:
            entries.append(FileEntry(rel, size, sha))
        faults.point("upload_file", **where)
    return entries


def copy_dir_local(local_dir: str, dest: str, **where: int) -> list[str | tuple[str, str]]:
    """Copy ``local_dir`` into ``dest`` on the local disk at kernel speed; return what ``hash_local``
    (a background thread, off the training thread's clock) hashes: relative paths, or (path, this
    rank's private copy) for a rank other than 0."""
    files = local_files(local_dir)
    copied: list[str | tuple[str, str]] = []
    rank = where.get("rank", 0)
    for absolute, rel in files:
        if rel == MANIFEST:
            continue
        target = os.path.join(dest, rel)
        faults.point("before_upload_file", **where)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # Ranks may write the same file into one checkpoint: copy to a private name, then rename,
        # so no rank ever hashes a file another rank is halfway through rewriting. Rank 0's copy
        # replaces any other; the others' never replace one already there (the commit keeps it).
        # A rank other than 0 hashes its private copy: rank 0 may still replace the shared one.
        partial = os.path.join(os.path.dirname(target), _partial_name(os.path.basename(target), rank))

        def copy(absolute: str = absolute, target: str = target, partial: str = partial) -> None:
            shutil.copyfile(absolute, partial)
            if rank == 0:
                os.replace(partial, target)
                return
            try:
                os.link(partial, target)
            except FileExistsError:  # another rank's copy stays
                pass

        with_retries("upload", target, copy)
        copied.append(rel if rank == 0 else (rel, partial))
        faults.point("upload_file", **where)
    os.makedirs(dest, exist_ok=True)
    return copied


def _partial_name(name: str, rank: int) -> str:
    """A rank's private copy of file ``name``, beside it: of a fixed length whatever the name's (a
    legal 255-byte name stays copyable), one per file, rank, process and thread."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f".{digest}.{rank}.{os.getpid()}.{threading.get_ident()}.part"


def copied_sizes(dest: str, copied: list[str | tuple[str, str]]) -> list[tuple[str, int]]:
    """(relative path, size) of what ``copy_dir_local`` copied."""
    return [(item[0], os.path.getsize(item[1])) if isinstance(item, tuple)
            else (item, os.path.getsize(os.path.join(dest, item))) for item in copied if
            (item[0] if isinstance(item, tuple) else item) not in _UNHASHED]


def hash_local(dest: str, copied: list[str | tuple[str, str]]) -> list[FileEntry]:
    entries = []
    for item in copied:
        private = isinstance(item, tuple)
        rel, path = item if private else (item, os.path.join(dest, item))
        if rel not in _UNHASHED:
            entries.append(FileEntry(rel, *_size_sha256(path)))
        if private:
            os.unlink(path)  # this rank's own copy, hashed
    return entries


def _size_sha256(path: str) -> tuple[int, str]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def download_dir(fs: "pafs.FileSystem", src: str, local_dir: str, fresh: bool = False) -> None:
    """Copy the files under ``src`` into ``local_dir`` (from a local source: regular files only,
    never what a link points to). On failure (a full disk) what this call created is removed and
    the error names both paths, so a retry starts from the space it had (``fresh``: ``local_dir``
    was made empty for this copy, and goes with it)."""
    existed = None if fresh else _local_tree(local_dir)
    store = store_of(fs)
    try:
        os.makedirs(local_dir, exist_ok=True)
        # where a checkpoint may be uploaded in place, the folder its manifest commits, and the manifest
        root = files_root(fs, src) if store.uploads_in_place else src
        store.copy_dir_to_local(fs, root, local_dir)
        if root != src:
            with open_input(fs, posixpath.join(src, MANIFEST)) as f, open(os.path.join(local_dir, MANIFEST), "wb") as out:
                out.write(f.read())
    except BaseException as exc:
        _remove_created(local_dir, existed)
        if isinstance(exc, OSError):
            raise OSError(exc.errno, f"copying checkpoint {redact(src)} into {local_dir} failed "
                                     f"({exc.strerror or exc}); the partial copy there was removed", local_dir) from exc
        raise


def _local_tree(root: str) -> set[str] | None:
    """Every path under ``root`` (None when it does not exist)."""
    if not os.path.lexists(root):
        return None
    return {os.path.join(d, n) for d, dirs, files in os.walk(root) for n in dirs + files}


def _remove_created(root: str, existed: set[str] | None) -> None:
    """Remove what is under ``root`` and not in ``existed`` (all of ``root`` when it was new)."""
    if existed is None:
        shutil.rmtree(root, ignore_errors=True)
        return
    for d, dirs, files in os.walk(root, topdown=False):
        for name in files + dirs:
            path = os.path.join(d, name)
            if path not in existed:
                with contextlib.suppress(OSError):
                    shutil.rmtree(path) if name in dirs and not os.path.islink(path) else os.unlink(path)


def hash_tree(fs: "pafs.FileSystem", root: str) -> list[FileEntry]:
    """Size and sha256 of every file under ``root`` on ``fs`` (for files uploaded by someone else)."""
    import pyarrow.fs as pafs

    entries = []
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True)):
        rel = posixpath.relpath(info.path, root)
        if info.type != pafs.FileType.File or rel in _UNHASHED:
            continue
        entries.append(FileEntry(rel, info.size, _sha256(fs, info.path)))
    return entries


def hash_file(fs: "pafs.FileSystem", root: str, rel: str) -> FileEntry:
    """Size and sha256 of the file ``rel`` under ``root``, as stored."""
    path = posixpath.join(root, rel)
    return FileEntry(rel, fs.get_file_info(path).size, _sha256(fs, path))


def _sha256(fs: "pafs.FileSystem", path: str) -> str:
    digest = hashlib.sha256()
    with open_input(fs, path) as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(fs: "pafs.FileSystem", checkpoint_path: str) -> dict[str, Any] | None:
    """The checkpoint's manifest; None when it is missing, unreadable, or names a path outside the
    checkpoint (its ``name`` or a ``files`` entry: refused with a warning naming it)."""
    source = posixpath.join(checkpoint_path, MANIFEST)
    try:
        with open_input(fs, source) as f:
            manifest = strict_json.loads(f.read())
    except (FileNotFoundError, NotRegularFileError, ValueError):
        return None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return None
    if "name" in manifest and stored_name(source, "name", manifest["name"]) is None:
        return None
    if not all(stored_relpath(source, "files", rel) for rel in manifest["files"]):
        return None
    return manifest


def files_root(fs: "pafs.FileSystem", checkpoint_path: str, manifest: dict[str, Any] | None = None) -> str:
    """Where the files of the checkpoint at ``checkpoint_path`` are: the folder its manifest's
    ``data`` names (uploaded in place on an object store: ``upload_path``), else the directory itself."""
    manifest = read_manifest(fs, checkpoint_path) if manifest is None else manifest
    data = (manifest or {}).get("data")
    if data is None:
        return checkpoint_path
    if not isinstance(data, str) or not ATTEMPT_DIR.fullmatch(data):
        raise CheckpointCorruptError(f"{checkpoint_path}: {MANIFEST} names data={data!r}, expected a folder "
                                     "like '.attempt-1-0123abcd' inside the checkpoint")
    return posixpath.join(checkpoint_path, data)


def verify_checkpoint(fs: "pafs.FileSystem", checkpoint_path: str) -> dict[str, Any]:
    """Return the manifest if every file matches it; else raise ``CheckpointCorruptError``."""
    manifest = read_manifest(fs, checkpoint_path)
    if manifest is None:
        raise CheckpointCorruptError(f"{checkpoint_path}: no readable {MANIFEST} (or one naming paths outside "
                                     "the checkpoint); the checkpoint was never committed")
    root = files_root(fs, checkpoint_path, manifest)
    for rel, expected in manifest["files"].items():
        path = posixpath.join(root, rel)
        try:
            size = store_of(fs).file_size(fs, path)
            actual = _sha256(fs, path)
        except FileNotFoundError:
            raise CheckpointCorruptError(f"{checkpoint_path}: {rel} is missing") from None
        except NotRegularFileError as exc:
            raise CheckpointCorruptError(f"{checkpoint_path}: {rel}: {exc.strerror or exc}") from None
        if size != expected.get("size") or actual != expected.get("sha256"):
            raise CheckpointCorruptError(f"{checkpoint_path}: {rel} does not match its sha256/size in the manifest")
    return manifest


def dump_manifest(manifest: dict) -> str:
    """A manifest as compact JSON: ``indent`` would force Python's slow encoder, half of a commit's
    time at 4,096 ranks (bench P10); ``python -m json.tool`` pretty-prints it."""
    return strict_json.dumps(manifest, separators=(",", ":"))


def file_type():
    import pyarrow.fs as pafs

    return pafs.FileType
