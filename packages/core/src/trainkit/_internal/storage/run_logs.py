"""Every rank's output, kept in the run directory: ``logs/attempt_<N>/rank_<R>.txt``.

On local storage the driver appends to those files as output arrives; on object storage it writes
them to a local temporary directory and uploads them when the attempt ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import IO

from trainkit._internal.storage import checkpoint_files
from trainkit._internal.storage import run_storage as storage_mod

LOGS = "logs"


class RunLogs:
    def __init__(self, storage: storage_mod.RunStorage):
        self._storage = storage
        self._local = storage.store.local_paths
        self._root = storage.path(LOGS) if self._local else tempfile.mkdtemp(prefix="trainkit-logs-")
        self._files: dict[int, IO[str]] = {}
        self._attempt: int | None = None

    def write(self, attempt: int, rank: int, text: str) -> None:
        if attempt != self._attempt:
            self.end_attempt()
            self._attempt = attempt
        if rank not in self._files:
            directory = os.path.join(self._root, f"attempt_{attempt}")
            os.makedirs(directory, exist_ok=True)
            # line-buffered: `tail -f` follows a local run
            self._files[rank] = open(os.path.join(directory, f"rank_{rank}.txt"), "a", buffering=1)
        self._files[rank].write(text + "\n")

    def end_attempt(self) -> None:
        """Close the attempt's files; on object storage upload them (a failed upload is the caller's to report)."""
        files, self._files = self._files, {}
        for f in files.values():
            f.close()
        if not self._local and self._attempt is not None and files:
            name = f"attempt_{self._attempt}"
            local = os.path.join(self._root, name)
            try:
                checkpoint_files.upload_dir(local, self._storage.fs, self._storage.path(LOGS, name))
            finally:
                shutil.rmtree(local, ignore_errors=True)

    def close(self) -> None:
        try:
            self.end_attempt()
        finally:
            if not self._local:
                shutil.rmtree(self._root, ignore_errors=True)
