"""What trainkit relies on in a run's filesystem, decided in one place: each pyarrow filesystem
type maps to its ``Capabilities``, resolved once per ``RunStorage`` (``storage.capabilities``) and
read by every module that writes or reads a run. A new storage backend is one entry in ``BY_TYPE``
(docs/extending.md, "Add a storage backend"); any other filesystem gets an object store's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Capabilities:
    local_paths: bool = False
    """Its paths are this machine's, so trainkit uses the operating system on them: a checkpoint
    commits by an atomic rename of its temporary directory, the metrics log and the ranks' logs append
    in place, an upload copies at kernel speed, and links, FIFOs and devices are never followed or
    opened (untrusted.py). Otherwise (an object store): a checkpoint uploads into its attempt's own
    folder and commits by its manifest, logs are written as whole objects, folders delete bottom-up."""
    exclusive_create: Literal["link", "if_none_match"] | None = None
    """How the run's lease file is created only if absent: ``"link"``, a hard link (POSIX);
    ``"if_none_match"``, S3's conditional PutObject (through boto3). None: written, then read back,
    with a warning that two drivers starting in the same instant may both take the run."""


OBJECT_STORE = Capabilities()
BY_TYPE = {  # pyarrow's ``FileSystem.type_name``: what trainkit may rely on there
    "local": Capabilities(local_paths=True, exclusive_create="link"),
    "s3": Capabilities(exclusive_create="if_none_match"),
}


def capabilities(fs: Any) -> Capabilities:
    """``fs``'s capabilities; an unknown filesystem (fsspec through ``PyFileSystem``, GCS, HDFS, a
    ``SubTreeFileSystem``) is treated as an object store."""
    return BY_TYPE.get(fs.type_name, OBJECT_STORE)
