"""TPU slices: their shape from ``accelerator_type`` and ``topology``, and slice-atomic placement.

A multi-host slice is only usable whole: every host runs one JAX process and the program spans
the slice's interconnect. Ray marks each TPU host with node labels (``ray.io/tpu-slice-name``,
``ray.io/tpu-worker-id``, ``ray.io/tpu-pod-type``) and gives a slice's worker 0 one
``TPU-<pod type>-head`` resource. Placement claims a slice through that head resource, reads the
slice's name from the node the claim landed on, then pins every worker bundle of that slice to
the name, so a run never mixes the free hosts of several half-busy slices.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

SLICE_NAME, WORKER_ID, POD_TYPE = "ray.io/tpu-slice-name", "ray.io/tpu-worker-id", "ray.io/tpu-pod-type"
# TensorCores per chip: a pod type counts cores (2x2x2 of v4 is "v4-16"), except for the 1-core chips.
CORES_PER_CHIP = {"v2": 2, "v3": 2, "v4": 2, "v5p": 2, "v5litepod": 1, "v6e": 1, "v7x": 2}
# Hosts of v5e/v6e hold up to 8 chips (a topology of <= 8 chips is one host); other hosts hold 4.
EIGHT_CHIP_HOSTS, CHIPS_PER_HOST = ("v5litepod", "v6e"), 4
MEGASCALE_PORT = "8081"  # the port libtpu's multi-slice coordinator listens on by default
_TOPOLOGY = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")


@dataclass(frozen=True)
class SliceShape:
    """One TPU slice: ``version`` (e.g. "v4"), ``chips`` in all, ``chips_per_host``."""

    version: str
    chips: int
    chips_per_host: int

    @property
    def hosts(self) -> int:
        return max(1, self.chips // self.chips_per_host)

    @property
    def pod_type(self) -> str:
        return f"{self.version}-{self.chips * CORES_PER_CHIP[self.version]}"

    @property
    def head_resource(self) -> str:
        return f"TPU-{self.pod_type}-head"


def tpu_version(accelerator_type: str) -> str | None:
    """"TPU-V6E" -> "v6e"; None when it names no known TPU."""
    version = accelerator_type.lower().removeprefix("tpu-")
    return version if version in CORES_PER_CHIP else None


def slice_shape(accelerator_type: str, topology: str) -> SliceShape:
    """The slice ``topology`` (e.g. "2x2x2") of ``accelerator_type`` (e.g. "TPU-V4"); ValueError naming the field."""
    version = tpu_version(accelerator_type)
    if version is None:
        allowed = ", ".join(f"TPU-{v.upper()}" for v in CORES_PER_CHIP)
        raise ValueError(f"accelerator_type={accelerator_type!r} is invalid with use_tpu=True: expected one of {allowed}")
    if not _TOPOLOGY.match(topology):
        raise ValueError(f"topology={topology!r} is invalid: expected chips per dimension, like '2x2' or '2x2x4'")
    chips = math.prod(int(d) for d in topology.split("x"))
    per_host = chips if version in EIGHT_CHIP_HOSTS and chips <= 8 else min(chips, CHIPS_PER_HOST)
    return SliceShape(version, chips, per_host)


def free_slices(shape: SliceShape, host_needs: dict[str, float]) -> list[str]:
    """Names of the slices of ``shape`` whose every host is alive and has ``host_needs`` available."""
    import ray

    from trainkit._internal.cluster.ray_private import available_resources_per_node

    available = available_resources_per_node()
    hosts: dict[str, list[str]] = {}
    for node in ray.nodes():
        labels = node.get("Labels", {})
        if node.get("Alive") and labels.get(POD_TYPE) == shape.pod_type and SLICE_NAME in labels:
            hosts.setdefault(labels[SLICE_NAME], []).append(node["NodeID"])
    return sorted(name for name, ids in hosts.items() if len(ids) == shape.hosts and all(
        available.get(i, {}).get(key, 0) >= amount for i in ids for key, amount in host_needs.items()))


def claim_slices(shape: SliceShape, count: int, host_needs: dict[str, float], timeout_s: float) -> tuple[list[str], list[Any]]:
    """Claims ``count`` slices of ``shape`` whose hosts all have ``host_needs`` free, through their
    head resource: the slices' names and the placement groups holding the claims (remove them once
    the workers are placed). Waits up to ``timeout_s`` for enough free slices (an autoscaler may
    add some), then raises TimeoutError naming what was asked."""
    import ray
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    if tuple(int(p) for p in ray.__version__.split(".")[:2]) < (2, 50):
        raise RuntimeError(f"placing multi-host TPU slices needs Ray >= 2.50 (bundle label selectors); "
                           f"this is Ray {ray.__version__}")
    deadline = time.monotonic() + timeout_s
    while len(free := free_slices(shape, host_needs)) < count and time.monotonic() < deadline:
        time.sleep(0.5)
    claims = []
    if len(free) >= count:
        selector = {WORKER_ID: "0", POD_TYPE: shape.pod_type, SLICE_NAME: f"in({','.join(free)})"}
        claims = [placement_group([{shape.head_resource: 1}], bundle_label_selector=[selector]) for _ in range(count)]
        ready, _ = ray.wait([c.ready() for c in claims], num_returns=count,
                            timeout=max(1.0, deadline - time.monotonic()))
        if len(ready) == count:
            labels = {n["NodeID"]: n.get("Labels", {}) for n in ray.nodes() if n.get("Alive")}
            return [labels[placement_group_table(c)["bundles_to_node_id"][0]][SLICE_NAME] for c in claims], claims
    for claim in claims:
        remove_placement_group(claim)
    raise TimeoutError(f"{len(free)} of {count} whole TPU slice(s) {shape.pod_type} were free within "
                       f"{timeout_s:.0f} s (every host of a slice with {host_needs} available)")


def rank_order(info: dict, slice_names: list[str]) -> tuple[int, int]:
    """Where a worker's host sorts: by slice, then by its worker id within the slice."""
    labels = info["labels"]
    return slice_names.index(labels[SLICE_NAME]), int(labels.get(WORKER_ID, 0))


def multislice_env(coordinator_ip: str, num_slices: int, slice_id: int) -> dict[str, str]:
    """What libtpu reads to join slices over the data-center network (MEGASCALE)."""
    return {"MEGASCALE_COORDINATOR_ADDRESS": coordinator_ip, "MEGASCALE_PORT": MEGASCALE_PORT,
            "MEGASCALE_NUM_SLICES": str(num_slices), "MEGASCALE_SLICE_ID": str(slice_id)}
