"""Worker bundles reserved by an enclosing Ray Tune trial (``trainkit.tune.trial_resources``).

A trainer running inside a trial whose placement group ends with one bundle per worker places
its workers there instead of creating a placement group the trial's own reservation would starve.
A trial that reserved nothing for its workers (Tune's default: 1 CPU for the trial) gets a placement
group of its own for them, outside the trial's; where they cannot be placed it fails at once.
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
    the trial itself) each hold ``resources``; else None. The bundle the trial itself runs in (a
    trial with resources of its own: Tune's default of 1 CPU) is never a worker's."""
    import ray

    group = ray.util.get_current_placement_group()
    if group is None:
        return None
    bundles = group.bundle_specs
    first = len(bundles) - num_workers
    if first not in (_own_bundles(), 1) or not all(_holds(bundle, resources) for bundle in bundles[first:]):
        return None
    return Reserved(group, first)


def _own_bundles() -> int:
    """1 when this task or actor holds resources (it then sits in its group's first bundle: Tune puts
    a trial there), 0 when it holds none (a trial whose head bundle is empty: Tune leaves it out)."""
    import ray

    return int(any(ray.get_runtime_context().get_assigned_resources().values()))


def _holds(bundle: dict[str, float], resources: dict[str, float]) -> bool:
    return all(bundle.get(name, 0) >= amount - 1e-9 for name, amount in resources.items() if amount)


def check_enclosing_reservation(num_workers: int, resources: dict[str, float]) -> None:
    """A trainer running in a placement group (a Ray Tune trial) that holds no bundles for its
    workers places them in a group of its own, next to the trial's (as Ray Train V2 does). Raise,
    naming the resources, when they cannot be placed now: never (the cluster minus the trial's
    own reservation is too small) or not while the trials hold what their workers wait for
    (fellow trials' trainers waiting on each other would each wait for the placement timeout)."""
    import ray

    group = ray.util.get_current_placement_group()
    if group is None or reserved_bundles(num_workers, resources):
        return
    need = {name: amount * num_workers for name, amount in resources.items() if amount}
    total, free = ray.cluster_resources(), ray.available_resources()
    held = {name: sum(bundle.get(name, 0) for bundle in group.bundle_specs) for name in need}
    never = {name: total.get(name, 0) - held[name] for name in need if total.get(name, 0) - held[name] < need[name] - 1e-9}
    short = {name: free.get(name, 0) for name in need if free.get(name, 0) < need[name] - 1e-9}
    if not never and not short:
        return
    each = ", ".join(f"{name}={amount:g}" for name, amount in resources.items() if amount)
    workers = f"its {num_workers} workers ({each} each: {_fmt(need)} in all)"
    if never:
        why = (f"the cluster can never place them: it has {_fmt({n: total.get(n, 0) for n in never})}, of which "
               f"this trial holds {_fmt({n: held[n] for n in never})}")
    else:
        why = f"the cluster has {_fmt(short)} free: the trials hold the resources their own workers wait for"
    raise RuntimeError(
        f"this trainer runs inside a Ray Tune trial whose reservation holds no bundles for {workers}, and {why}. "
        "Reserve the workers with the trial: tune.with_resources(trial, trainkit.tune.trial_resources(scaling_config))"
        + ("; or lower num_workers / resources_per_worker." if never else
           "; or run fewer trials at once: tune.TuneConfig(max_concurrent_trials=...)."))


def _fmt(amounts: dict[str, float]) -> str:
    return ", ".join(f"{name}={amount:g}" for name, amount in amounts.items())
