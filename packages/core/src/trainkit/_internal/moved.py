"""Names that moved from one public module to another and stay importable from the old one for
a deprecation period of one minor release (docs/extending.md), with a ``DeprecationWarning`` that
names the new place (a module ``__getattr__``, PEP 562).

The old module may sit below the new one in core's layers (``trainkit.checkpoint`` below
``trainkit.framework``), so it never imports the new module, not even inside a function: the new
module hands its objects down here when it is imported (``import trainkit`` imports it), and the
old module's ``__getattr__`` gives out those very objects. This module imports nothing of trainkit.

Example (in ``trainkit/checkpoint.py``, and ``provide(__name__, globals())`` in ``trainkit/framework.py``)::

    __getattr__ = moved_names(__name__, {"resume_file": "trainkit.framework"})
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping

__all__ = ["moved_names", "provide"]

_provided: dict[str, Mapping[str, Any]] = {}  # new module -> its namespace


def provide(module: str, namespace: Mapping[str, Any]) -> None:
    """The new ``module`` (its ``globals()``) gives out the names that moved into it."""
    _provided[module] = namespace


def moved_names(old_module: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The old module's ``__getattr__``: ``names`` maps each moved name to the module it moved to.
    Each use warns (``DeprecationWarning``, at the caller's line) and returns the new module's object."""

    def __getattr__(name: str) -> Any:
        new_module = names.get(name)
        if new_module is None:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        namespace = _provided.get(new_module)
        if namespace is None or name not in namespace:  # only while trainkit itself is being imported
            raise AttributeError(f"{old_module}.{name} moved to {new_module}: import it from there")
        warnings.warn(f"{old_module}.{name} moved to {new_module}.{name}: import it from {new_module} "
                      f"(the old name is deprecated and goes after one minor release)",
                      DeprecationWarning, stacklevel=2)
        return namespace[name]

    return __getattr__
