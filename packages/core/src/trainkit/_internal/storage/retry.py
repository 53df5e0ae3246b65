"""Retries for storage calls: transient errors are retried with backoff; persistent ones are
raised at once as ``StorageError`` with the path and errno."""

from __future__ import annotations

import errno
import time
from typing import Callable, TypeVar

from trainkit.errors import NotRegularFileError, StorageError

T = TypeVar("T")

# Errors that retrying cannot fix: the store's limits (space, quota, file size, name length, links),
# its permissions, its nature (read-only, an operation it lacks), the path's state.
PERSISTENT = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENAMETOOLONG, errno.EMLINK, errno.ELOOP,
              errno.EACCES, errno.EPERM, errno.EROFS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV,
              errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOTEMPTY, errno.EINVAL}
# About 15 s in all: a storage outage that short (an S3 endpoint restarting) is ridden out.
BACKOFF_S = (0.1, 0.5, 1.5, 3.0, 4.0, 6.0)


def with_retries(operation: str, path: str, fn: Callable[[], T], backoff_s: tuple[float, ...] = BACKOFF_S) -> T:
    """Run ``fn``; retry ``OSError`` that may be transient (I/O errors, 5xx, timeouts) with backoff."""
    for attempt in range(len(backoff_s) + 1):
        try:
            return fn()
        except StorageError:
            raise
        except (FileNotFoundError, NotRegularFileError):  # retrying finds the same
            raise
        except OSError as exc:
            if getattr(exc, "errno", None) in PERSISTENT or attempt == len(backoff_s):
                raise StorageError(operation, path, exc) from exc
            time.sleep(backoff_s[attempt])
    raise AssertionError("unreachable")
