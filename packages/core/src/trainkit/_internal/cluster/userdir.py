"""This user's private directory for trainkit's local files (the embedded cluster's, the warm one's)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def private_dir() -> Path:
    """``$TMPDIR/trainkit-<uid>``: 0700 and this user's, checked (another user may have made it first)."""
    path = Path(tempfile.gettempdir()) / f"trainkit-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{path} is not a directory of this user's: remove it, or set TMPDIR elsewhere")
    if stat.S_IMODE(info.st_mode) != 0o700:
        path.chmod(0o700)
    return path
