"""What trackers can plot: the numbers in a report, nested dicts flattened to ``outer/inner``."""

from __future__ import annotations

import numbers
from typing import Any, Mapping


def flatten(tree: Mapping[str, Any], separator: str, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level, their keys joined by ``separator``."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, separator, prefix=f"{prefix}{key}{separator}"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def scalar_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a report, nested names as ``outer/inner``."""
    return {name: float(value) for name, value in flatten(metrics, "/").items()
            if isinstance(value, numbers.Real) and not isinstance(value, bool)}


def flat_params(config: Mapping[str, Any] | None) -> dict[str, str]:
    """A ``train_loop_config`` as ``outer.inner`` -> text (tracker parameters)."""
    return {name: str(value) for name, value in flatten(config or {}, ".").items()}


def require(module: str, extra: str, callback: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{callback} needs {module}: pip install 'trainkit-core[{extra}]'") from exc
