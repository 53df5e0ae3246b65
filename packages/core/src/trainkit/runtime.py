"""What a runtime plugin (entry-point group ``trainkit.runtimes``, hooks in ``hookspecs.py``) hands
core when it connected this process to a cluster of its own instead of the embedded one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class AttachedCluster:
    """A single-machine cluster this process attached to (``trainkit_attach_cluster``).

    Core treats it as its own cluster (one node, the driver's machine): a lost node is the whole
    cluster, workers run in the driver's directory with its whole environment (they are not the
    driver's children), and ``down`` is polled as the embedded cluster's GCS and raylet are.
    """

    address: str  # the GCS address connected to
    kind: str  # a word for messages: "the whole {kind} Ray cluster"
    down: Callable[[], "str | None"]  # why the cluster is gone (e.g. its raylet ended), or None while it runs
