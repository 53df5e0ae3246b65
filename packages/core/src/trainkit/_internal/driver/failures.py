"""What an attempt's failure was, told from the evidence (a rank's error; a dead rank: its node lost
or cut off, killed by the kernel's out-of-memory killer or otherwise; a full disk), and what it
means for the restart (which nodes it avoids)."""

from __future__ import annotations

import errno
from typing import Any

from trainkit._internal.cluster import ray_runtime
from trainkit._internal.cluster.oom import oom_evidence
from trainkit._internal.worker.events import Failed
from trainkit.backend import WorkerInfo
from trainkit.errors import FailureKind, PreemptionError, TrainingFailedError, WorkerGroupError


def storage_full(error: BaseException | None) -> str | None:
    """What a full disk or quota said (ENOSPC, EDQUOT), if that is among the failure's causes: the
    driver's own, or a rank's error."""
    seen: list[BaseException] = []
    pending = [error] if error is not None else []
    while pending:
        exc = pending.pop()
        if exc is None or any(exc is s for s in seen):
            continue
        seen.append(exc)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"{errno.errorcode[exc.errno]}: {exc.filename or exc}"
        pending += [exc.__cause__, exc.__context__, *getattr(exc, "worker_failures", {}).values(),
                    getattr(exc, "controller_failure", None)]
    return None


def cut_off_a_node(error: TrainingFailedError, group: Any) -> bool:
    """Whether the failure leaves a node of ``group`` unfit for the restart: lost, preempted, or cut off
    (a rank unreachable before Ray marks its node dead). A kept placement group would place a worker
    of the restart there again, to die as Ray marks the node dead."""
    import ray

    failures = getattr(error, "worker_failures", None) or {}
    try:
        return (isinstance(error, PreemptionError)
                or any(isinstance(exc, ray.exceptions.ActorUnavailableError) for exc in failures.values())
                or any(node_lost(node_id) for node_id in {w.node_id for w in group.workers}))
    except Exception:  # noqa: BLE001 - Ray's node table out of reach: nothing is known fit
        return True


def unreachable_nodes(error: TrainingFailedError, group: Any) -> frozenset[str]:
    """Nodes, other than the driver's, where a rank stopped answering (``ActorUnavailableError``): a
    network cut, which Ray notices only after its health checks (~30 s) and may never notice if it heals.
    The restart places no worker there: Ray 2.60 may send a placement group's bundle request to such a
    node and wait for its answer until the placement times out (seen 3 in 10 restarts across a real
    partition, tests/multihost)."""
    import ray

    failures = getattr(error, "worker_failures", None) or {}
    nodes = {w.world_rank: w.node_id for w in group.workers}
    driver_node = ray.get_runtime_context().get_node_id()  # a process of its own node is never cut off from it
    return frozenset(nodes[rank] for rank, exc in failures.items()
                     if isinstance(exc, ray.exceptions.ActorUnavailableError) and nodes.get(rank, driver_node) != driver_node)


def training_error(event: Failed) -> TrainingFailedError:
    error = WorkerGroupError(
        f"rank {event.rank} raised {event.type_name}: {event.message}\n\nWorker traceback:\n{event.traceback}",
        {event.rank: event.exception or RuntimeError(f"{event.type_name}: {event.message}")},
        rank=event.rank, error_type=event.type_name, worker_traceback=event.traceback)
    error.__cause__ = event.exception
    return error


def node_lost(node_id: str) -> str | None:
    """Why Ray's node table (its GCS) marks the node ``node_id`` dead; None while it is alive."""
    import ray
    from ray.core.generated.common_pb2 import NodeDeathInfo

    node = next((n for n in ray.nodes() if n.get("NodeID") == node_id), None)
    if node is None or node.get("Alive"):
        return None
    reason = NodeDeathInfo.Reason.Name(node.get("DeathReason", 0))
    message = node.get("DeathReasonMessage") or "no reason given"
    where = f"node {node.get('NodeManagerAddress')} (node id {node_id[:12]})"
    if "health check" in message:  # the GCS stopped hearing from its raylet
        return (f"{where} is unreachable: Ray marked it dead ({reason}: {message}); the network to it, or the "
                "machine, went down. Its worker processes may still run there, cut off (trainkit's commits "
                "never take an earlier attempt's files)")
    return f"{where} was lost: Ray marked it dead ({reason}: {message})"


def rank_died(rank: int, exc: BaseException, worker: WorkerInfo, attempt: int, log: str, tail: str) -> WorkerGroupError:
    """A rank's process is gone: its node was lost (Ray's node table says why), it stopped
    answering (Ray cannot yet tell a cut network from a dead process), or it was killed (out of
    memory, SIGKILL, a crash) and what it printed last (``tail``; all of it: ``log``) is the clue."""
    import ray

    lost = node_lost(worker.node_id)
    if lost:
        why = f"died with its node ({type(exc).__name__}): {lost}"
        if ray_runtime.own_cluster() is not None:  # the one node of trainkit's single-machine cluster
            kind = attached.kind if (attached := ray_runtime.attached_cluster()) else "embedded"
            return WorkerGroupError(f"rank {rank} {why}; it was the whole {kind} Ray cluster: every worker went "
                                    f"with it (attempt {attempt})", {rank: exc}, rank=rank,
                                    error_type=FailureKind.CLUSTER_DIED)
    elif isinstance(exc, ray.exceptions.ActorUnavailableError):
        why = (f"is unreachable: its worker process on node {worker.ip} (node id {worker.node_id[:12]}) stopped "
               f"answering ({type(exc).__name__}): the network to that node, or the machine, went down, or the "
               "process was stopped. A process cut off may still run there (trainkit's commits never take an "
               "earlier attempt's files)")
    elif killed := oom_evidence(worker.node_id, worker.pid):
        why = (f"was killed by the kernel's out-of-memory killer on node {worker.ip} "
               f"(node id {worker.node_id[:12]}): its worker process (pid {worker.pid}) needed more memory than its limit allowed; the kernel "
               f"said: {killed}")
    else:
        kernel = ("the kernel's log names no out-of-memory kill of it" if killed == "" else
                  "e.g. out of memory: the kernel's log could not be read to tell")
        why = (f"died: its worker process (pid {worker.pid}) on node {worker.ip} exited unexpectedly "
               f"({type(exc).__name__}; killed by a signal or by the system, {kernel})")
    return WorkerGroupError(f"rank {rank} {why}\n\nLast output of rank {rank} (all of it: {log}):\n{tail}",
                            {rank: exc}, rank=rank, error_type=FailureKind.WORKER_DIED)
