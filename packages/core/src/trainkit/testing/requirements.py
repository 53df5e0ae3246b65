"""``requires(...)``: one marker for what a test needs, with a skip reason a person can act on."""

from __future__ import annotations

import importlib.metadata

import pytest
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from trainkit._internal.cluster.gpus import gpu_count


def _unmet(distributions: dict[str, str], gpus: int) -> list[str]:
    reasons = []
    for dist, spec in distributions.items():
        try:
            wanted = SpecifierSet(spec)
        except InvalidSpecifier as exc:
            raise ValueError(f"requires({dist}={spec!r}): not a version specifier such as '>=2.4'") from exc
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            reasons.append(f"needs {dist}{spec} (not installed)")
            continue
        if not wanted.contains(installed, prereleases=True):
            reasons.append(f"needs {dist}{spec} (installed: {installed})")
    if gpus and (found := gpu_count()) < gpus:
        reasons.append(f"needs {gpus} GPU{'s' if gpus > 1 else ''} (found {found})")
    return reasons


def requires(gpus: int = 0, **distributions: str):
    """Skip unless the named distributions are installed in the given version ranges and enough
    GPUs are visible; with ``gpus`` the test is also marked ``gpu`` (``pytest -m gpu`` selects the
    GPU checks, ``nox -s gpu`` runs them). Decorates test functions and classes.

    Example::

        @requires(torch=">=2.6", gpus=2)
        def test_fsdp_on_two_gpus(ray_cluster): ...

    skips with "needs torch>=2.6 (installed: 2.4.1); needs 2 GPUs (found 0)".
    Distribution names with dashes are written with underscores (``requires(lightning_fabric="")``).
    """
    reasons = _unmet({name.replace("_", "-"): spec for name, spec in distributions.items()}, gpus)
    skip = pytest.mark.skipif(bool(reasons), reason="; ".join(reasons) or "requirements met")
    if not gpus:
        return skip
    return lambda test: pytest.mark.gpu(skip(test))
