"""What trackers can plot: the numbers in a report, nested dicts flattened to ``outer/inner``."""

from __future__ import annotations

import numbers
from typing import Any, Mapping


def scalar_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    scalars: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            scalars.update(scalar_metrics(value, prefix=f"{name}/"))
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            scalars[name] = float(value)
    return scalars


def flat_params(config: Mapping[str, Any] | None, prefix: str = "") -> dict[str, str]:
    """A ``train_loop_config`` as flat ``outer.inner`` -> text pairs (tracker parameters)."""
    params: dict[str, str] = {}
    for key, value in (config or {}).items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            params.update(flat_params(value, prefix=f"{name}."))
        else:
            params[name] = str(value)
    return params


def require(module: str, extra: str, callback: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{callback} needs {module}: pip install 'trainkit[{extra}]'") from exc
