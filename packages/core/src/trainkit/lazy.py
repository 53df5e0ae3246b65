"""``lazy_exports``: a package ``__init__`` names a class whose module imports a framework, without
importing it until the name is used (the driver and the plugin loader never pay for it).

Example (in ``trainkit_xgboost/__init__.py``)::

    __all__ = ["ReportCallback", "XGBoostTrainer"]
    __getattr__ = lazy_exports(__name__, {"ReportCallback": "trainkit_xgboost.callback"})
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``names`` maps each lazy name to the module it is imported from on
    first use (then kept in ``package``); any other name raises AttributeError as usual."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
