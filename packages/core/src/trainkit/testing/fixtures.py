"""pytest fixtures shared by trainkit's own tests and plugin authors' tests."""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

import pytest

from trainkit.config import RunConfig

_names = itertools.count()


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A quiet local Ray instance with 4 logical CPUs for the test module (2 workers x 1 CPU fit twice)."""
    import ray

    from trainkit._internal.ray_runtime import ensure_ray

    if ray.is_initialized():
        ray.shutdown()
    ensure_ray(num_cpus=4)
    yield ray
    ray.shutdown()


@pytest.fixture
def run_config(tmp_path: Any) -> Callable[..., RunConfig]:
    """``run_config(**kwargs)``: a quiet ``RunConfig`` with a fresh name under ``tmp_path``."""

    def make(**kwargs: Any) -> RunConfig:
        kwargs.setdefault("name", f"run{next(_names)}")
        kwargs.setdefault("storage_path", str(tmp_path / "storage"))
        kwargs.setdefault("verbose", 0)
        return RunConfig(**kwargs)

    return make
