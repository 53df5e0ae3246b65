"""How the user spelled the settings trainkit's messages name: in Python (``RunConfig(name=...)``)
or as ``trainkit launch`` flags (``--name``). Every message that advises a setting asks here, so
it speaks the interface the run was started with."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

_PYTHON = {"name": "RunConfig", "storage_path": "RunConfig", "max_failures": "FailureConfig",
           "max_preemption_failures": "FailureConfig", "num_workers": "ScalingConfig",
           "resources_per_worker": "ScalingConfig"}
LAUNCH_FLAGS = {"name": "--name", "storage_path": "--storage-path", "max_failures": "--max-failures",
                "num_workers": "--nproc", "resources_per_worker": "--cpus-per-worker/--gpus-per-worker"}
_flags: dict[str, str] = {}  # the command line's, while a `trainkit launch` runs
_UNSET: Any = object()


def setting(field: str, value: Any = _UNSET) -> str:
    """``field`` as the user sets it: ``RunConfig(name=...)`` / ``FailureConfig.max_failures=2``
    from Python, ``--name`` / ``--max-failures 2`` under ``trainkit launch``."""
    if field in _flags:
        return _flags[field] if value is _UNSET else f"{_flags[field]} {value}"
    return f"{_PYTHON[field]}({field}=...)" if value is _UNSET else f"{_PYTHON[field]}.{field}={value}"


def field_label(field: str) -> str:
    """The label of ``field`` in a validation error (``name=`` from Python, ``--name=`` from launch)."""
    return _flags.get(field, field)


@contextlib.contextmanager
def command_line(flags: dict[str, str]) -> Iterator[None]:
    """Messages name ``flags`` (setting -> flag) instead of the Python API while inside."""
    previous = dict(_flags)
    _flags.update(flags)
    try:
        yield
    finally:
        _flags.clear()
        _flags.update(previous)
