"""What trainkit does differently on each kind of filesystem, in one place: one small class per
kind behind one interface (``Store``), chosen by the filesystem's type once per ``RunStorage``
(``storage.store``). A new storage backend is one entry in ``BY_TYPE`` (docs/extending.md, "Add a
storage backend"); a filesystem it does not name is an ``ObjectStore``, which promises the least.

- ``LocalStore``, this machine's paths (a local disk, or a shared one mounted here): a file is
  replaced by a rename, a checkpoint commits by renaming its temporary directory into place, logs
  append in place, an upload copies at kernel speed, links, FIFOs and devices are never followed or
  opened (untrusted.py), and the lease is created by a hard link.
- ``ObjectStore``: a file is replaced by one PUT; a directory cannot be renamed, so a checkpoint is
  copied into place with its manifest last (or uploaded in place: ``uploads_in_place``); folders
  delete bottom-up; logs are written as whole objects. Its lease is written, then read back: two
  drivers starting the same run in the same instant may both take it (warned once).
- ``S3Store``: an object store whose lease is created by a conditional PUT (``If-None-Match: *``).

Every method here does one storage operation once; ``RunStorage`` retries it and fences it.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import uuid
from typing import TYPE_CHECKING, Any, ClassVar

from trainkit._internal import faults
from trainkit._internal.display import warn
from trainkit._internal.storage import strict_json
from trainkit._internal.storage.retry import with_retries
from trainkit._internal.storage.untrusted import open_regular
from trainkit.errors import NotRegularFileError, StorageError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

MANIFEST = ".manifest.json"  # a checkpoint's list of files: what its commit writes last
METADATA = ".metadata.json"  # a checkpoint's user metadata: copied with its files, never hashed
TMP_PREFIX = ".tmp-"  # trainkit's temporary files and directories in a run directory


def exists(fs: "pafs.FileSystem", path: str) -> bool:
    import pyarrow.fs as pafs

    return fs.get_file_info(path).type != pafs.FileType.NotFound


def _is_dir(info: Any) -> bool:
    import pyarrow.fs as pafs

    return info.type == pafs.FileType.Directory


def _is_file(info: Any) -> bool:
    import pyarrow.fs as pafs

    return info.type == pafs.FileType.File


class Store:
    """One kind of filesystem: how trainkit reads, replaces, creates, lists and moves on it."""

    local_paths: ClassVar[bool] = False
    """Its paths are this machine's (other modules pick their own way by it: logs appended in place,
    uploads copied at kernel speed)."""
    uploads_in_place: ClassVar[bool] = False
    """Whether ranks may upload a new checkpoint straight into its final place, the manifest being
    the commit (``RunStorage.upload_path``): where renaming the temporary directory is impossible."""

    def open_input(self, fs: "pafs.FileSystem", path: str) -> Any:
        """A stream of the stored file ``path``."""
        raise NotImplementedError

    def list_dir(self, fs: "pafs.FileSystem", path: str, recursive: bool, top_may_link: bool) -> list:
        """The entries under ``path`` (none when it is missing)."""
        raise NotImplementedError

    def file_size(self, fs: "pafs.FileSystem", path: str) -> int | None:
        """The size of the stored file ``path``."""
        raise NotImplementedError

    def replace(self, fs: "pafs.FileSystem", path: str, data: bytes, prev: str | None = None) -> None:
        """Make ``path`` hold ``data``, atomically: a reader sees the old bytes or the new, whole.
        With ``prev``, the old bytes (if any) are kept there."""
        raise NotImplementedError

    def create_exclusive(self, fs: "pafs.FileSystem", path: str, data: bytes) -> bool:
        """Create ``path`` holding ``data`` unless it exists; whether this call created it (retried)."""
        raise NotImplementedError

    def check_run_dir(self, root: str, run_path: str) -> None:
        """Refuse a run directory that is not where it claims to be (before anything is written)."""

    def install(self, run: Any, tmp_path: str, final: str, manifest: str) -> None:
        """Put the whole checkpoint in ``tmp_path`` (its manifest in it) at ``final`` of ``run``
        (a ``RunStorage``), retiring a checkpoint of the same name only once the new one is whole."""
        raise NotImplementedError

    def delete_dir(self, run: Any, path: str) -> None:
        """Delete the folder ``path`` of ``run`` and everything in it (``FileNotFoundError`` if missing)."""
        with_retries("delete", path, lambda: run.fs.delete_dir(path))

    def move_dir(self, run: Any, path: str, dest: str) -> None:
        """Move the folder ``path`` of ``run`` to ``dest`` (its parent created)."""
        raise NotImplementedError

    def copy_dir_to_local(self, fs: "pafs.FileSystem", src: str, local_dir: str) -> None:
        """Copy every file under ``src`` into ``local_dir`` (which exists)."""
        raise NotImplementedError


class LocalStore(Store):
    local_paths = True

    def open_input(self, fs: "pafs.FileSystem", path: str) -> Any:
        return open_regular(path)  # a regular file only, and a FIFO or device never blocks the reader

    def list_dir(self, fs: "pafs.FileSystem", path: str, recursive: bool, top_may_link: bool) -> list:
        """Without symbolic links: a link in a run directory (or ``path`` itself, unless
        ``top_may_link``: the run directory, which ``check_run_dir`` checks) is never followed, moved
        or deleted; trainkit warns, naming it and its target, and leaves it alone."""
        import pyarrow.fs as pafs

        if not top_may_link and os.path.islink(path):
            _warn_link(path)
            return []
        kept = []
        for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=recursive)):
            if os.path.islink(info.path):
                _warn_link(info.path)
            elif not any(os.path.islink(posixpath.join(path, parent))
                         for parent in _parents(posixpath.relpath(info.path, path))):
                kept.append(info)
        return kept

    def file_size(self, fs: "pafs.FileSystem", path: str) -> int | None:
        return fs.get_file_info(path).size  # what it is, opening tells (open_regular)

    def replace(self, fs: "pafs.FileSystem", path: str, data: bytes, prev: str | None = None) -> None:
        folder, name = os.path.split(path)
        tmp = os.path.join(folder, f"{TMP_PREFIX}{name}.{uuid.uuid4().hex}")  # one per write, on any host
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if prev is not None and os.path.exists(path):
                os.replace(path, prev)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)  # a full disk leaves nothing behind
            raise
        _fsync_dir(folder)

    def create_exclusive(self, fs: "pafs.FileSystem", path: str, data: bytes) -> bool:
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"

        def link() -> bool:
            with open(tmp, "wb") as f:
                f.write(data)
            try:
                os.link(tmp, path)  # fails if path exists, and the content is whole when it appears
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)

        return with_retries("create", path, link)

    def check_run_dir(self, root: str, run_path: str) -> None:
        if os.path.lexists(run_path):
            real_root, real_run = os.path.realpath(root), os.path.realpath(run_path)
            if os.path.dirname(real_run) != real_root:
                raise ValueError(f"run directory {run_path} resolves to {real_run}, outside the storage "
                                 f"path {real_root} (a symlink?); refusing to write there")

    def install(self, run: Any, tmp_path: str, final: str, manifest: str) -> None:
        replaced = f"{tmp_path}-replaced"
        if exists(run.fs, final):  # a name reported again, or an orphan of a crash: swap, then drop
            with_retries("rename", replaced, lambda: run.fs.move(final, replaced))
        with_retries("rename", final, lambda: run.fs.move(tmp_path, final))
        run.delete_dir(replaced)

    def move_dir(self, run: Any, path: str, dest: str) -> None:
        folder = os.path.dirname(dest)
        if os.path.lexists(folder) and (os.path.islink(folder) or not os.path.isdir(folder)):
            kind = f"a symbolic link (to {os.readlink(folder)})" if os.path.islink(folder) else "not a directory"
            raise NotADirectoryError(f"{folder} is {kind}")
        with_retries("create", dest, lambda: run.fs.create_dir(folder, recursive=True))
        with_retries("rename", dest, lambda: run.fs.move(path, dest))

    def copy_dir_to_local(self, fs: "pafs.FileSystem", src: str, local_dir: str) -> None:
        shutil.copytree(src, local_dir, dirs_exist_ok=True, ignore=_not_regular)  # never what a link points to


class ObjectStore(Store):
    uploads_in_place = True
    _warned_not_exclusive: ClassVar[bool] = False  # once a process
    _no_exclusive_hint: ClassVar[str] = ""  # how to get an atomic create, named in that warning

    def open_input(self, fs: "pafs.FileSystem", path: str) -> Any:
        return fs.open_input_stream(path)

    def list_dir(self, fs: "pafs.FileSystem", path: str, recursive: bool, top_may_link: bool) -> list:
        import pyarrow.fs as pafs

        return fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=recursive))

    def file_size(self, fs: "pafs.FileSystem", path: str) -> int | None:
        info = fs.get_file_info(path)
        if _is_dir(info):  # a key prefix reads as an empty file on some stores
            raise NotRegularFileError(f"{path} is a directory, not a regular file")
        return info.size

    def replace(self, fs: "pafs.FileSystem", path: str, data: bytes, prev: str | None = None) -> None:
        if prev is not None and exists(fs, path):
            fs.copy_file(path, prev)
        with fs.open_output_stream(path) as f:  # one PUT: atomic on object stores
            f.write(data)

    def create_exclusive(self, fs: "pafs.FileSystem", path: str, data: bytes) -> bool:
        """Written, then read back: best effort (warned once a process)."""
        if not ObjectStore._warned_not_exclusive:
            ObjectStore._warned_not_exclusive = True
            warn(f"{type(fs).__name__} has no atomic create-if-absent trainkit can use{self._no_exclusive_hint}: "
                 "two drivers starting the same run in the same instant may both take its lock", stacklevel=4)
        if with_retries("read", path, lambda: exists(fs, path)):
            return False
        with_retries("write", path, lambda: self.replace(fs, path, data))
        return _holds(self, fs, path, data)

    def install(self, run: Any, tmp_path: str, final: str, manifest: str) -> None:
        """Copy the files over (an old checkpoint of this name loses its manifest first, so it is never
        mixed with new files), the manifest last; ``tmp_path`` stays until then."""
        run.delete_file(posixpath.relpath(posixpath.join(final, MANIFEST), run.run_path))
        names = [*strict_json.loads(manifest)["files"]]
        if exists(run.fs, posixpath.join(tmp_path, METADATA)):
            names.append(METADATA)
        for rel in names:
            src, dst = posixpath.join(tmp_path, rel), posixpath.join(final, rel)
            with_retries("copy", dst, lambda: (run.fs.create_dir(posixpath.dirname(dst), recursive=True),
                                               run.fs.copy_file(src, dst)))
        faults.point("before_manifest", index=strict_json.loads(manifest).get("index"))
        with_retries("write manifest", final, lambda: run.write_manifest(final, manifest))
        for info in run.entries(final, recursive=True):  # files of the retired checkpoint the new one lacks
            rel = posixpath.relpath(info.path, final)
            if _is_file(info) and rel not in names and rel != MANIFEST:
                with_retries("delete", info.path, lambda: run.fs.delete_file(info.path))
        run.delete_dir(tmp_path)

    def delete_dir(self, run: Any, path: str) -> None:
        for info in run.entries(path):  # subfolders first: SeaweedFS keeps a folder whose subfolder went
            if _is_dir(info):  # with it in one delete_dir, listed but undeletable
                run.delete_dir(info.path)
        super().delete_dir(run, path)

    def move_dir(self, run: Any, path: str, dest: str) -> None:
        import pyarrow.fs as pafs

        with_retries("copy", dest, lambda: pafs.copy_files(path, dest, source_filesystem=run.fs,
                                                          destination_filesystem=run.fs))
        run.delete_dir(path)

    def copy_dir_to_local(self, fs: "pafs.FileSystem", src: str, local_dir: str) -> None:
        import pyarrow.fs as pafs

        pafs.copy_files(src, local_dir, source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())


class S3Store(ObjectStore):
    _no_exclusive_hint = " (pip install boto3 for S3)"

    def create_exclusive(self, fs: "pafs.FileSystem", path: str, data: bytes) -> bool:
        """A conditional PUT; a 412 to a retry whose first try landed but lost its answer is this call's
        own (the object holds its bytes). Without boto3: an object store's write and read back."""
        client = _s3_client(fs)
        if client is None:
            return super().create_exclusive(fs, path, data)
        from botocore.exceptions import ClientError

        bucket, _, key = path.partition("/")

        def put() -> bool:
            try:
                client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
                return True
            except ClientError as exc:
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status in (409, 412):  # 409: a concurrent conditional write to the same key
                    return False
                if status and status >= 500:
                    raise OSError(f"S3 PutObject {path}: HTTP {status}") from exc
                raise StorageError("create", path, OSError(str(exc))) from None

        return with_retries("create", path, put) or _holds(self, fs, path, data)


BY_TYPE: dict[str, Store] = {  # pyarrow's ``FileSystem.type_name``: how trainkit works there
    "local": LocalStore(),
    "s3": S3Store(),
}
OBJECT_STORE = ObjectStore()


def store_of(fs: Any) -> Store:
    """``fs``'s kind; an unknown filesystem (fsspec through ``PyFileSystem``, GCS, HDFS, a
    ``SubTreeFileSystem``) is treated as an object store."""
    return BY_TYPE.get(fs.type_name, OBJECT_STORE)


def _holds(store: Store, fs: "pafs.FileSystem", path: str, data: bytes) -> bool:
    """Whether ``path`` holds exactly ``data`` (bytes unique to one create call: they hold its token)."""
    def read() -> bytes:
        with store.open_input(fs, path) as f:
            return f.read()

    try:
        return with_retries("read", path, read) == data
    except FileNotFoundError:
        return False


def _s3_client(fs: Any) -> Any:
    """A boto3 client with the credentials and endpoint of a pyarrow ``S3FileSystem`` (None: no boto3)."""
    try:
        import boto3
    except ImportError:
        return None
    options = fs.__reduce__()[1][0]  # the constructor's arguments
    endpoint = options.get("endpoint_override") or None
    if endpoint and "://" not in endpoint:
        endpoint = f"{options.get('scheme') or 'https'}://{endpoint}"
    return boto3.client("s3", endpoint_url=endpoint, region_name=options.get("region") or None,
                        aws_access_key_id=options.get("access_key") or None,
                        aws_secret_access_key=options.get("secret_key") or None,
                        aws_session_token=options.get("session_token") or None)


def _parents(rel: str) -> list[str]:
    parts = rel.split("/")[:-1]
    return ["/".join(parts[:i + 1]) for i in range(len(parts))]


def _warn_link(path: str) -> None:
    warn(f"{path} is a symbolic link (to {os.readlink(path)}); trainkit never follows, moves or deletes "
         "links in a run directory and leaves it alone", stacklevel=4)


def _not_regular(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if os.path.islink(p := os.path.join(directory, n))
            or not (os.path.isfile(p) or os.path.isdir(p))]


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
