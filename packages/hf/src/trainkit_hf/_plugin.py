"""Entry point of trainkit-hf: registers the ``hf`` backend and refuses Hugging Face datasets and
metrics built in the driver. Imports no Hugging Face library."""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterator

from trainkit import hookimpl

from trainkit_hf.config import HFConfig

FRAMEWORK = "transformers"
# Objects that hold open Arrow cache files or metric state: built in the driver, they travel to the
# workers as paths that only exist on the driver's machine, or as state that no rank shares.
BUILD_ON_WORKERS = {"datasets": ("Dataset", "DatasetDict", "IterableDataset", "IterableDatasetDict"),
                    "evaluate": ("EvaluationModule", "CombinedEvaluations")}


@hookimpl
def trainkit_register_backends(registry) -> None:
    from trainkit_torch import TorchTrainer

    registry.register("hf", HFConfig, TorchTrainer)


@hookimpl
def trainkit_check_inputs(train_loop_per_worker: Callable, train_loop_config: dict | None,
                          datasets: dict | None) -> None:
    classes = tuple(getattr(sys.modules[module], name) for module, names in BUILD_ON_WORKERS.items()
                    if module in sys.modules for name in names if hasattr(sys.modules[module], name))
    if not classes:
        return  # neither library is imported: the driver holds none of their objects
    for where, value in _inputs(train_loop_per_worker, train_loop_config, datasets):
        if isinstance(value, classes):
            raise TypeError(
                f"{where} is a {type(value).__module__.split('.')[0]}.{type(value).__name__} built in the driver. "
                "Create Hugging Face datasets and evaluate metrics inside the training function, so each worker "
                "loads its own (pass what it needs, such as a name or a path, in train_loop_config)")


def _inputs(fn: Callable, config: dict | None, datasets: dict | None) -> Iterator[tuple[str, Any]]:
    """Every value a run ships to its workers: the config, the datasets, and what the training
    function captures (closure cells and the module globals it names), one container level deep."""
    top: list[tuple[str, Any]] = [(f"train_loop_config[{k!r}]", v) for k, v in (config or {}).items()]
    top += [(f"datasets[{k!r}]", v) for k, v in (datasets or {}).items()]
    code = getattr(fn, "__code__", None)
    if code is not None:
        cells = zip(code.co_freevars, fn.__closure__ or ())
        top += [(f"{fn.__qualname__} captures {name!r}", _cell_value(cell)) for name, cell in cells]
        top += [(f"{fn.__qualname__} uses global {name!r}", fn.__globals__[name])
                for name in code.co_names if name in fn.__globals__]
    for where, value in top:
        yield where, value
        if isinstance(value, dict):
            yield from ((f"{where}[{k!r}]", v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            yield from ((f"{where}[{i}]", v) for i, v in enumerate(value))


def _cell_value(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None
