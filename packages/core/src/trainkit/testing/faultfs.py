"""A filesystem that fails on purpose: ``pyarrow.fs.PyFileSystem`` over the local disk, raising
chosen errors on chosen write calls. Picklable, so workers get their own copy (and counters).

Example::

    fs = faulty_filesystem(write_errors=[errno.EIO, errno.EIO])   # the first 2 writes fail, then work
    RunConfig(storage_path="/tmp/runs", storage_filesystem=fs)
"""

from __future__ import annotations

import errno as errno_mod
import os

import pyarrow.fs as pafs


class FaultyHandler(pafs.FileSystemHandler):
    """Delegates to the local filesystem; the writes numbered ``skip_writes + i`` raise
    ``OSError(write_errors[i])``; with ``always`` the last error repeats forever."""

    def __init__(self, write_errors: list[int], skip_writes: int = 0, always: bool = False):
        self.write_errors, self.skip_writes, self.always = list(write_errors), skip_writes, always
        self.writes = 0
        self._fs = pafs.LocalFileSystem()

    def __reduce__(self):
        return FaultyHandler, (self.write_errors, self.skip_writes, self.always)

    def _maybe_fail(self, path: str) -> None:
        n = self.writes - self.skip_writes
        self.writes += 1
        if n < 0 or not self.write_errors:
            return
        if n < len(self.write_errors) or self.always:
            code = self.write_errors[min(n, len(self.write_errors) - 1)]
            raise OSError(code, f"injected: {os.strerror(code)}", path)

    def open_output_stream(self, path, metadata):
        self._maybe_fail(path)
        return self._fs.open_output_stream(path, metadata=metadata)

    def create_dir(self, path, recursive):
        self._fs.create_dir(path, recursive=recursive)

    # -- plain delegation ----------------------------------------------------------------------
    def get_type_name(self):
        return "faulty-local"

    def get_file_info(self, paths):
        return self._fs.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self._fs.get_file_info(selector)

    def delete_dir(self, path):
        self._fs.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self._fs.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise OSError(errno_mod.EPERM, "refusing to delete the root")

    def delete_file(self, path):
        self._fs.delete_file(path)

    def move(self, src, dest):
        self._fs.move(src, dest)

    def copy_file(self, src, dest):
        self._maybe_fail(dest)
        self._fs.copy_file(src, dest)

    def open_input_stream(self, path):
        return self._fs.open_input_stream(path)

    def open_input_file(self, path):
        return self._fs.open_input_file(path)

    def open_append_stream(self, path, metadata):
        self._maybe_fail(path)
        return self._fs.open_append_stream(path, metadata=metadata)

    def normalize_path(self, path):
        return self._fs.normalize_path(path)


def faulty_filesystem(write_errors: list[int], skip_writes: int = 0, always: bool = False) -> pafs.FileSystem:
    return pafs.PyFileSystem(FaultyHandler(write_errors, skip_writes, always))
