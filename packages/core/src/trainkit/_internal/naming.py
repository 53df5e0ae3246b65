"""Validation of names that become paths (run names, checkpoint directory names)."""

from __future__ import annotations

import re
from typing import Any

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=,-]{0,127}")


def validate_name(field_name: str, value: Any) -> str:
    """Return ``value`` if it is a safe single path component, else raise ``ValueError``.

    Allowed: 1-128 characters of ASCII letters, digits, ``.``, ``_``, ``-``, ``=`` and ``,`` (Ray
    Tune's trial names: ``train-trial_id=abc,lr=0.1``), starting with a letter or digit. That
    excludes ``..``, separators, absolute paths, NUL and look-alike Unicode.
    """
    if not isinstance(value, str) or not _NAME.fullmatch(value) or value in (".", ".."):
        raise ValueError(
            f"{field_name}={value!r} is invalid: expected 1-128 characters of ASCII letters, digits, "
            "'.', '_', '-', '=' or ',', starting with a letter or digit (no path separators)"
        )
    return value
