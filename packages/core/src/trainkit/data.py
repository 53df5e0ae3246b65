"""``DataConfig``: how the trainer's Ray Data datasets reach the workers (Ray Train's semantics).

Ray Data is an extra (``pip install "trainkit-core[data]"``); nothing here imports it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

from trainkit.config import _bad, _check_bool

__all__ = ["DataConfig"]


def _execution_options_type() -> Any:
    """``ray.data.ExecutionOptions``; only asked for when a user passed some (so Ray Data is loaded)."""
    from ray.data import ExecutionOptions

    return ExecutionOptions


@dataclass(frozen=True)
class DataConfig:
    """Which Ray Data datasets are split across the workers, and with which execution options.

    A split dataset gives each rank its own streaming shard (``Dataset.streaming_split(world_size,
    equal=True)``): in every epoch each row goes to exactly one rank, and all ranks must iterate
    their shard the same number of times. A dataset not split gives every rank all rows. Objects
    that are not Ray Datasets are passed to every worker unchanged.

    ``execution_options``: one ``ray.data.ExecutionOptions`` for every dataset or a dict
    ``{name: ExecutionOptions}``; None keeps each dataset's own. ``enable_shard_locality``: give
    ranks the blocks produced on their own node where possible.

    Example::

        trainer = trainkit.Trainer(train_fn, backend="torch", datasets={"train": train_ds, "eval": eval_ds},
                                   dataset_config=trainkit.DataConfig(datasets_to_split=["train"]))
    """

    datasets_to_split: Literal["all"] | Sequence[str] = "all"
    execution_options: Any = None
    enable_shard_locality: bool = True

    def __post_init__(self) -> None:
        split = self.datasets_to_split
        if split != "all":
            if isinstance(split, str) or not isinstance(split, (list, tuple)) or not all(
                    isinstance(name, str) for name in split):
                raise _bad("datasets_to_split", split, "'all' or a list of dataset names")
            object.__setattr__(self, "datasets_to_split", list(split))
        _check_bool("enable_shard_locality", self.enable_shard_locality)
        options = self.execution_options
        if options is not None:
            allowed = "None, a ray.data.ExecutionOptions or a dict {dataset name: ExecutionOptions}"
            values = options.values() if isinstance(options, Mapping) else [options]
            if "ray.data" not in sys.modules or not all(
                    isinstance(value, _execution_options_type()) for value in values) or (
                    isinstance(options, Mapping) and not all(isinstance(k, str) for k in options)):
                raise _bad("execution_options", options, allowed)

    def splits(self, name: str) -> bool:
        """Whether dataset ``name`` is split across the workers."""
        return self.datasets_to_split == "all" or name in self.datasets_to_split

    def options_for(self, name: str) -> Any:
        """The execution options for dataset ``name``, or None to keep the dataset's own."""
        options = self.execution_options
        return options.get(name) if isinstance(options, Mapping) else options
