"""The trust boundary of storage: what trainkit reads back from a run directory (run_state.json,
manifests, listings, the lock, metrics segments) may have been written by anyone with access to
the bucket or disk. Every name or path read back passes here before it is used in a path, and
every file is opened as a regular file that cannot block. A value that fails is refused with a
warning naming the file and the field; the caller goes on without it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
from typing import IO, Any

from trainkit._internal.naming import validate_name
from trainkit.errors import NotRegularFileError

_HEX = re.compile(r"[0-9a-f]{1,64}")


def _refuse(source: str, field: str, value: Any, allowed: str) -> None:
    from trainkit._internal.display import warn

    warn(f"{source}: {field}={value!r} is refused ({allowed}); trainkit ignores it and touches nothing "
         "outside the run directory", stacklevel=4)


def stored_name(source: str, field: str, value: Any) -> str | None:
    """``value`` if it is a safe single path component (``naming.validate_name``), else None with
    a warning naming ``source`` (the file it was read from) and ``field``."""
    try:
        return validate_name(field, value)
    except ValueError:
        _refuse(source, field, value, "expected a plain name: letters, digits, '.', '_', '-', '=', ','")
        return None


def stored_relpath(source: str, field: str, value: Any) -> str | None:
    """``value`` if it is a relative posix path whose every component is a plain name, else None
    with a warning naming ``source`` and ``field``."""
    parts = value.split("/") if isinstance(value, str) else [None]
    if all(isinstance(p, str) and p not in ("", ".", "..") and "\0" not in p and len(p) <= 255 for p in parts) \
            and len(value) <= 4096:
        return value
    _refuse(source, field, value, "expected a relative path inside the directory, without '..'")
    return None


def stored_token(source: str, field: str, value: Any) -> str | None:
    """``value`` if it is a hex token (as trainkit writes them), else None with a warning."""
    if isinstance(value, str) and _HEX.fullmatch(value):
        return value
    _refuse(source, field, value, "expected a hex token")
    return None


def describe(mode: int) -> str:
    for test, kind in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return kind
    return "not a regular file"


def open_regular(path: str, append: bool = False) -> IO[bytes]:
    """Open the local file ``path`` for reading (``append``: for reading and appending, created if
    missing, unbuffered) if it is a regular file (not through a final symlink), without ever
    blocking (a FIFO opened plainly waits for a writer); else raise ``NotRegularFileError`` naming it."""
    flags = (os.O_RDWR | os.O_APPEND | os.O_CREAT) if append else os.O_RDONLY
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise NotRegularFileError(exc.errno, f"{path} is {describe(os.lstat(path).st_mode)}, not a regular file",
                                      path) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFileError(errno.EINVAL, f"{path} is {describe(mode)}, not a regular file", path)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return os.fdopen(fd, "a+b", buffering=0) if append else os.fdopen(fd, "rb")

