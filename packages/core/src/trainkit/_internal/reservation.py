"""Worker bundles reserved by an enclosing Ray Tune trial (``trainkit.tune.trial_resources``).

A trainer running inside a trial whose placement group ends with one bundle per worker places
its workers there instead of creating a placement group the trial's own reservation would starve.
A trial that reserved nothing for its workers, on a cluster its fellow trials fill, fails at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reserved:
    placement_group: Any
    first_bundle: int  # worker i goes to bundle first_bundle + i


def reserved_bundles(num_workers: int, resources: dict[str, float]) -> Reserved | None:
    """The current placement group when its last ``num_workers`` bundles (after at most one for
    the trial itself) each hold ``resources``; else None."""
    import ray

    group = ray.util.get_current_placement_group()
    if group is None:
        return None
    bundles = group.bundle_specs
    first = len(bundles) - num_workers
    if first not in (0, 1) or not all(_holds(bundle, resources) for bundle in bundles[first:]):
        return None
    return Reserved(group, first)


def _holds(bundle: dict[str, float], resources: dict[str, float]) -> bool:
    return all(bundle.get(name, 0) >= amount - 1e-9 for name, amount in resources.items() if amount)


def check_enclosing_reservation(num_workers: int, resources: dict[str, float]) -> None:
    """Raise, naming the fix, when this trainer runs in a placement group (a Ray Tune trial) that
    holds no bundles for its workers and the cluster has no room left for them: without that
    check the workers would wait for resources the trials themselves hold, attempt after attempt."""
    import ray

    if ray.util.get_current_placement_group() is None or reserved_bundles(num_workers, resources):
        return
    free = ray.available_resources()
    short = {name: amount * num_workers for name, amount in resources.items()
             if free.get(name, 0) < amount * num_workers - 1e-9}
    if short:
        raise RuntimeError(
            f"this trainer runs inside a Ray Tune trial whose reservation holds no bundles for its "
            f"{num_workers} workers, and the cluster has {free} free where they need {short}: the trials "
            "hold the resources their own workers wait for. Reserve the workers with the trial: "
            "tune.with_resources(trial, trainkit.tune.trial_resources(scaling_config))")
