"""Elastic sizing: how many workers the cluster can place now, for ``num_workers=(min, max)``.

A resize is a restart: the group stops and a new one, of the new size, resumes from the last
committed checkpoint with contiguous ranks (what torchrun's elastic agent and Ray Train do).
"""

from __future__ import annotations

import math


def workers_that_fit(resources: dict[str, float], avoid_nodes: frozenset[str] = frozenset()) -> int:
    """Workers of ``resources`` each that the cluster's free resources hold now, node by node (not
    counting ``avoid_nodes``)."""
    import ray

    from trainkit._internal.cluster.ray_private import available_resources_per_node

    alive = {node["NodeID"] for node in ray.nodes() if node.get("Alive")}
    needs = {key: amount for key, amount in resources.items() if amount > 0}
    return sum(min(math.floor(free.get(key, 0.0) / amount + 1e-9) for key, amount in needs.items())
               for node, free in available_resources_per_node().items() if node in alive - avoid_nodes)
