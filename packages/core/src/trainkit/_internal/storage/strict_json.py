"""The JSON of every file trainkit writes: strict RFC 8259, which ``jq`` and ``json.loads`` with a
``parse_constant`` that rejects NaN accept (Python's default writes bare ``NaN``/``Infinity``).

A non-finite float is written as a tagged object, ``{"$float": "NaN"}``, ``{"$float": "Infinity"}``
or ``{"$float": "-Infinity"}``, and read back as the float. (A reported dict of exactly that shape
reads back as the float too.) Bare ``NaN``/``Infinity``, as earlier versions wrote, still read.
"""

from __future__ import annotations

import json
import math
from typing import Any

TAG = "$float"
_NAMES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _tagged(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return {TAG: "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")}
    if isinstance(value, dict):
        return {key: _tagged(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tagged(item) for item in value]
    return value


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes a bare NaN or Infinity (see the module's doc)."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)  # the common case, at the C encoder's speed
    except ValueError:
        return json.dumps(_tagged(obj), allow_nan=False, **kwargs)


def _untag(obj: dict) -> Any:
    if len(obj) == 1 and isinstance(name := obj.get(TAG), str) and name in _NAMES:
        return _NAMES[name]
    return obj


def loads(text: str | bytes) -> Any:
    """``json.loads`` that reads the tagged floats ``dumps`` writes back as floats."""
    if isinstance(text, bytes):
        text = text.decode()
    return json.loads(text, object_hook=_untag) if TAG in text else json.loads(text)
