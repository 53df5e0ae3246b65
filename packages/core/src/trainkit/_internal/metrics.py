"""The metrics policy of ``report()``: what is accepted, what is converted, what is rejected.

- Accepted as they are: ``str``, ``bool``, ``int``, ``float`` (NaN and ±inf included: a diverging
  loss is worth seeing), ``None``, and dicts (string keys) and lists/tuples of these.
- Converted: one-element array-likes with ``.item()`` (NumPy scalars, 0-d or 1-element tensors).
- Rejected with the key path: everything else (sets, bytes, arbitrary objects, larger arrays),
  nesting deeper than 32 levels, a report larger than 1 MiB of JSON.
- Redacted: the value under a key naming a secret setting (``password``, ``api_key``,
  ``hub_token``, ... see ``redact.SECRET_SETTINGS``) is stored as ``"***"``: metrics are written
  to disk and shown to whoever reads the run. Other names pass (``tokens_per_second``).
"""

from __future__ import annotations

import json
from typing import Any

from trainkit._internal.redact import is_secret_setting

_MAX_DEPTH = 32
_MAX_BYTES = 1 << 20


def _convert(value: Any, path: str, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise ValueError(f"{path}: nested deeper than {_MAX_DEPTH} levels")
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path}: key {key!r} is a {type(key).__name__}; metric keys must be strings")
            out[key] = "***" if is_secret_setting(key) else _convert(item, f"{path}[{key!r}]", depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_convert(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    item = getattr(value, "item", None)
    if callable(item):  # NumPy scalars, one-element arrays and tensors; larger ones raise
        try:
            scalar = item()
        except (ValueError, RuntimeError, TypeError):
            scalar = None
        if isinstance(scalar, (str, bool, int, float)):
            return scalar
    raise ValueError(
        f"{path}: {type(value).__name__} is not a metric value; report numbers, strings, bools, "
        "None, or lists/dicts of them (one-element arrays and tensors are converted with .item())"
    )


def validate_metrics(metrics: Any) -> dict[str, Any]:
    """Return a JSON-ready copy of ``metrics`` or raise ``ValueError`` naming the offending key."""
    if not isinstance(metrics, dict):
        raise ValueError(f"metrics must be a dict, got {type(metrics).__name__}")
    converted = _convert(metrics, "metrics", 0)
    size = len(json.dumps(converted, allow_nan=True))
    if size > _MAX_BYTES:
        raise ValueError(f"metrics: {size} bytes of JSON exceeds the {_MAX_BYTES}-byte limit per report; "
                         "save large values as checkpoint files")
    return converted

