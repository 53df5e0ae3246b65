"""``Checkpoint``: a directory of files on some filesystem, plus a little JSON metadata."""

from __future__ import annotations

import contextlib
import enum
import os
import posixpath
import shutil
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from trainkit._internal.moved import moved_names
from trainkit._internal.storage import checkpoint_files
from trainkit._internal.storage import run_storage as storage
from trainkit._internal.storage import strict_json
from trainkit._internal.storage.stores import METADATA, store_of
from trainkit.errors import NotRegularFileError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["Checkpoint", "ReportedCheckpoint", "ReportedCheckpointStatus"]

# Moved to trainkit.framework (above this module's layer); importable from here, with a
# DeprecationWarning, for one minor release.
__getattr__ = moved_names(__name__, {name: "trainkit.framework" for name in (
    "CheckpointIO", "ModelFileCheckpointIO", "resume_file")})


class Checkpoint:
    """A directory of checkpoint files, local or on any ``pyarrow.fs`` filesystem.

    Example::

        with tempfile.TemporaryDirectory() as tmp:
            torch.save(model.state_dict(), os.path.join(tmp, "model.pt"))
            trainkit.report({"loss": loss}, checkpoint=Checkpoint.from_directory(tmp))

        checkpoint = trainkit.get_checkpoint()
        if checkpoint:
            with checkpoint.as_directory() as path:
                model.load_state_dict(torch.load(os.path.join(path, "model.pt"), weights_only=True))
    """

    def __init__(self, path: str | os.PathLike, filesystem: "pafs.FileSystem | None" = None):
        path = os.fspath(path)
        if filesystem is None:
            filesystem, path = storage.resolve_filesystem(path)
        self.path: str = path
        self.filesystem: "pafs.FileSystem" = filesystem

    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> "Checkpoint":
        """A checkpoint for a local directory (its files are uploaded when reported)."""
        import pyarrow.fs as pafs

        return cls(os.path.abspath(os.fspath(path)), pafs.LocalFileSystem())

    @property
    def uri(self) -> str:
        """Where the checkpoint lives: its local path, or ``scheme://bucket/key`` on an object store."""
        scheme = self.filesystem.type_name
        return self.path if scheme == "local" or "::" in scheme else f"{scheme}://{self.path}"

    def _is_local(self) -> bool:
        return store_of(self.filesystem).local_paths

    def to_directory(self, path: str | os.PathLike | None = None) -> str:
        """Copy the checkpoint's files into a local directory (a new temp dir by default). On failure
        (a full disk) what it copied is removed again and the ``OSError`` names the directory."""
        target = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="trainkit-ckpt-")
        if self._is_local() and os.path.abspath(target) == os.path.abspath(self.path):
            return target
        checkpoint_files.download_dir(self.filesystem, self.path, target, fresh=path is None)
        return target

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """The checkpoint as a local directory: the directory itself when local, else a temp copy."""
        if self._is_local():
            yield self.path
            return
        target = self.to_directory()
        try:
            yield target
        finally:
            shutil.rmtree(target, ignore_errors=True)

    def verify(self) -> dict[str, Any]:
        """Check every file against the manifest written at commit; return the manifest.

        Raises ``trainkit.CheckpointCorruptError`` when a file is missing, altered, or listed outside
        the checkpoint, or when there is no manifest (the checkpoint was never committed).
        """
        return checkpoint_files.verify_checkpoint(self.filesystem, self.path)

    # -- metadata ------------------------------------------------------------------------------
    def _metadata_path(self) -> str:
        root = self.path if self._is_local() else checkpoint_files.files_root(self.filesystem, self.path)
        return posixpath.join(root, METADATA)

    def get_metadata(self) -> dict[str, Any]:
        """The checkpoint's JSON metadata (``{}`` when none was set)."""
        try:
            with checkpoint_files.open_input(self.filesystem, self._metadata_path()) as f:  # never blocks on a FIFO
                return strict_json.loads(f.read())
        except (FileNotFoundError, NotRegularFileError):
            return {}

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        """Replace the metadata; it must be JSON-serializable."""
        data = strict_json.dumps(metadata).encode()
        self.filesystem.create_dir(self.path, recursive=True)
        with self.filesystem.open_output_stream(self._metadata_path()) as f:
            f.write(data)

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        """Merge ``metadata`` into the existing metadata."""
        self.set_metadata({**self.get_metadata(), **metadata})

    # -- value semantics -----------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r}, filesystem={type(self.filesystem).__name__})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Checkpoint) and self.path == other.path
                and type(self.filesystem) is type(other.filesystem))

    def __hash__(self) -> int:
        return hash(self.path)


class ReportedCheckpointStatus(enum.Enum):
    """Where a reported checkpoint stands (Ray Train's names; trainkit's workers see the first two)."""

    COMMITTED = "COMMITTED"
    PENDING_VALIDATION = "PENDING_VALIDATION"
    VALIDATED = "VALIDATED"
    VALIDATION_TIMEOUT = "VALIDATION_TIMEOUT"
    VALIDATION_FAILED = "VALIDATION_FAILED"


@dataclass
class ReportedCheckpoint:
    """A committed checkpoint with the metrics reported with it, from ``get_all_reported_checkpoints()``.

    Example::

        for reported in trainkit.get_all_reported_checkpoints():
            print(reported.checkpoint.path, reported.metrics["loss"], reported.status)
    """

    checkpoint: Checkpoint
    metrics: dict[str, Any]
    status: ReportedCheckpointStatus = ReportedCheckpointStatus.COMMITTED
