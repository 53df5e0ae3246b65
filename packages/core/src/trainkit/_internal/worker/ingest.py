"""Each rank's datasets for one attempt: Ray Datasets become streaming shards or iterators.

The controller calls ``datasets_per_rank`` once per attempt, after the worker group started (it
needs the workers' nodes). Callables in ``datasets`` are called there, so every attempt builds its
datasets afresh, as Ray Train does. Ray Data is imported only when a Ray Dataset was passed.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from trainkit.data import DataConfig


def is_ray_dataset(value: Any) -> bool:
    module = sys.modules.get("ray.data")  # a Ray Dataset exists only once ray.data was imported
    return module is not None and isinstance(value, module.Dataset)


@dataclass(frozen=True)
class Datasets:
    """The trainer's ``datasets`` and ``dataset_config``, checked before any worker starts."""

    datasets: dict[str, Any] = field(default_factory=dict)
    config: DataConfig = field(default_factory=DataConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.datasets, dict) or not all(isinstance(k, str) for k in self.datasets):
            raise TypeError(f"datasets must be a dict {{name: dataset}} with str names, got {self.datasets!r:.200}")
        if not isinstance(self.config, DataConfig):
            raise TypeError(f"dataset_config must be a trainkit.DataConfig, got {type(self.config).__name__}")
        split = self.config.datasets_to_split
        unknown = [] if split == "all" else sorted(set(split) - set(self.datasets))
        if unknown:
            raise ValueError(f"DataConfig.datasets_to_split names {unknown}, which are not among the trainer's "
                             f"datasets {sorted(self.datasets)}")
        for name, value in self.datasets.items():
            if not callable(value):  # a factory's dataset is checked when it is built
                _check_splittable(name, value, self.config)


def _check_splittable(name: str, value: Any, config: DataConfig) -> None:
    if config.datasets_to_split != "all" and config.splits(name) and not is_ray_dataset(value):
        raise TypeError(f"datasets[{name!r}] is a {type(value).__name__}, not a ray.data.Dataset: "
                        "DataConfig.datasets_to_split can only name Ray Datasets")


def datasets_per_rank(spec: Datasets | None, node_ids: list[str | None]) -> list[dict[str, Any]]:
    """For each rank (in rank order, ``node_ids[rank]`` its node): name -> what
    ``get_dataset_shard(name)`` returns there."""
    world_size = len(node_ids)
    out: list[dict[str, Any]] = [{} for _ in range(world_size)]
    if spec is None:
        return out
    config = spec.config
    for name, value in spec.datasets.items():
        value = _build(name, value)
        _check_splittable(name, value, config)
        if not is_ray_dataset(value):
            for ranks in out:
                ranks[name] = value
            continue
        value = _with_options(value, name, config)
        if config.splits(name) and world_size > 1:
            hints = node_ids if config.enable_shard_locality and all(node_ids) else None
            parts = value.streaming_split(world_size, equal=True, locality_hints=hints)
        else:
            parts = [value.iterator() for _ in range(world_size)]
        for ranks, part in zip(out, parts):
            ranks[name] = part
    return out


def _build(name: str, value: Any) -> Any:
    """A callable is this attempt's dataset factory."""
    if not callable(value) or is_ray_dataset(value):
        return value
    factory: Callable[[], Any] = value
    try:
        return factory()
    except Exception as exc:
        raise RuntimeError(f"datasets[{name!r}]: calling {getattr(factory, '__qualname__', factory)!r} "
                           f"failed: {type(exc).__name__}: {exc}") from exc


def _with_options(ds: Any, name: str, config: DataConfig) -> Any:
    options = config.options_for(name)
    if options is None:
        return ds
    ds = ds.copy(ds)  # not the user's object: its context is changed
    ds.context.execution_options = copy.deepcopy(options)
    return ds
