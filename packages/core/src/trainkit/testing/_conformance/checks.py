"""Checks of what the workers reported: ranks, all-gathers, data shards, cross-node loopback,
resources released. Each raises AssertionError with what the plugin's author must fix."""

from __future__ import annotations

from typing import Any


def _check_ranks(metrics: list[dict], n: int, trainer: str) -> None:
    """Every rank's report of ``_ranks_fn``: trainkit's ranks, the framework's, and an all-gather in order."""
    assert len(metrics) == n, f"{trainer}: {len(metrics)} rank(s) reported, expected {n}"
    for rank, m in enumerate(metrics):
        assert m["world_rank"] == rank and m["world_size"] == n, f"{trainer}: rank {rank} reported {m}"
        assert m["framework_rank"] == rank, (
            f"{trainer}: on trainkit rank {rank} framework_rank() returned {m['framework_rank']}, expected {rank}: "
            "the backend must give each worker the framework rank trainkit.get_context().get_world_rank() says")
        assert m["gathered"] == [float(r) for r in range(n)], (
            f"{trainer}: on rank {rank} all_gather(rank) returned {m['gathered']}, expected "
            f"{[float(r) for r in range(n)]} (every rank's value, in rank order, on every rank)")
    assert sorted((m["node_rank"], m["local_rank"]) for m in metrics) == [(0, r) for r in range(n)], metrics
    assert all(m["local_world_size"] == n for m in metrics), metrics




_LOOPBACK_HINT = ("127.0.0.1 is each host's own loopback: on two hosts the rank dialing it reaches its own host, "
                  "not the other rank's. Take the address from worker_group.free_address(rank) or "
                  "worker_group.rendezvous() (rank 0's node address), never a fixed 127.0.0.1/localhost")



def _cross_node_loopback(snapshots: list[dict], ray_servers: list[list], judged_ports: set[int] | None) -> list[str]:
    """Connections a rank dialed through 127.0.0.1 to a rank on another node, in words. Servers the
    workers ran before ``Backend.on_start`` (Ray's own, ``ray_servers``: [pid, port]) aside; only
    servers on ``judged_ports`` where it is not None."""
    by_end = {}  # (local ip, port, remote ip, port) -> (rank, node ip, pid)
    servers = set()  # (pid, port) of every listening socket
    for snap in snapshots:
        servers.update(tuple(server) for server in snap.get("listening", []))
        for pid, lip, lport, rip, rport in snap["connections"]:
            by_end[(lip, lport, rip, rport)] = (snap["world_rank"], snap["node_ip"], pid)
    servers -= {tuple(server) for server in ray_servers}
    found = set()
    for snap in snapshots:
        for pid, lip, lport, rip, rport in snap["connections"]:
            peer = by_end.get((rip, rport, lip, lport))
            dialed = rip.removeprefix("::ffff:")
            if (peer and (peer[2], rport) in servers and peer[1] != snap["node_ip"]
                    and (judged_ports is None or rport in judged_ports)
                    and (dialed.startswith("127.0.0.1") or dialed == "::1")):
                found.add(f"rank {snap['world_rank']} (node {snap['node_ip']}) reached rank {peer[0]} "
                          f"(node {peer[1]}) at {dialed}:{rport}")
    return sorted(found)


def _check_two_nodes(out: dict, n: int, suite: str, has_shard: bool) -> None:
    where = "with its ranks on two nodes (127.0.0.2 and 127.0.0.3, simulated on this machine)"
    # where the hostname resolves to 127.0.0.1, a framework's default bind address is loopback here though
    # not on real hosts (gloo's): then only the ports the worker group handed the backend are judged
    judged = set(out.get("handed_ports", [])) if str(out.get("hostname_address")).startswith("127.0.0.1") else None
    loopback = _cross_node_loopback(out.get("after_on_start", []) + (out.get("reports") or [[]])[-1],
                                    out.get("listening_before", []), judged)
    assert not loopback, f"{suite}: {where}, ranks talk across nodes through 127.0.0.1: {'; '.join(loopback)}. " \
                         + _LOOPBACK_HINT
    assert "error" not in out, (f"{suite}: the run failed {where}: {out['error']}. A rendezvous address fixed to "
                                f"127.0.0.1/localhost, or a socket bound to loopback only, breaks on two hosts: "
                                f"take rank 0's node address from worker_group.free_address(0) or rendezvous(). "
                                f"(A framework that binds by network interface name cannot run on these simulated "
                                f"nodes, whose addresses are on no interface: set simulated_nodes = False)")
    reports = out.get("reports") or []
    assert len(reports) == 1, f"{suite}: {where}, {len(reports)} reports reached the driver, expected 1"
    metrics = reports[0]
    assert len(metrics) == n, f"{suite}: {where}, {len(metrics)} rank(s) reported, expected {n}"
    assert len({m["node_ip"] for m in metrics}) == 2, f"{suite}: the ranks did not span two nodes: {metrics}"
    for rank, m in enumerate(metrics):
        assert m["framework_rank"] == rank, (
            f"{suite}: {where}, on trainkit rank {rank} (node rank {m['node_rank']}, local rank {m['local_rank']}) "
            f"framework_rank() returned {m['framework_rank']}: the framework rank must be the global rank "
            "(trainkit.get_context().get_world_rank()), not the local one")
        assert m["gathered"] == [float(r) for r in range(n)], (
            f"{suite}: {where}, on rank {rank} all_gather(rank) returned {m['gathered']}, expected "
            f"{[float(r) for r in range(n)]}")
    if has_shard:
        _check_shards({m["world_rank"]: m for m in metrics}, f"{suite}: {where}, the data helper (shard)")


def _check_shards(by_rank: dict[int, dict], label: str, size: int | None = None) -> None:
    """Each rank's ``rows`` of ``range(size)`` (``_probes.SHARD_ROWS`` by default): together every row;
    pairwise disjoint where ``size`` divides by the world size; else at most world size - 1 rows
    given twice (a sampler's padding, so that every rank steps in lockstep) and rank sizes within 1."""
    from trainkit.testing._probes import SHARD_ROWS

    size = SHARD_ROWS if size is None else size
    ranks, world = sorted(by_rank), len(by_rank)
    shards = {r: [int(x) for x in by_rank[r]["rows"]] for r in ranks}
    covered = set().union(*(set(rows) for rows in shards.values()))
    missing = sorted(set(range(size)) - covered)
    assert not missing, (f"{label}: no rank got rows {missing} of {size} over {world} rank(s) (shards by rank: "
                         f"{shards}): the shards must cover the dataset, the remainder of {size} rows over "
                         f"{world} ranks included (never drop it: give it to some ranks, or pad)")
    if size % world:
        given = sum(len(rows) for rows in shards.values())
        lengths = sorted(len(rows) for rows in shards.values())
        assert given - size <= world - 1 and lengths[-1] - lengths[0] <= 1, (
            f"{label}: {size} rows over {world} ranks gave {given} rows in shards of sizes {lengths} ({shards}): "
            f"at most {world - 1} rows may be given twice (padding) and shard sizes may differ by one at most")
        return
    for i, a in enumerate(ranks):
        for b in ranks[i + 1:]:
            same = sorted(set(shards[a]) & set(shards[b]))
            if same:
                ma, mb = by_rank[a], by_rank[b]
                raise AssertionError(
                    f"{label} gave rank {a} (node rank {ma.get('node_rank')}, local rank {ma.get('local_rank')}) and "
                    f"rank {b} (node rank {mb.get('node_rank')}, local rank {mb.get('local_rank')}) the same rows "
                    f"{same} of {size}: shard by the global rank and world size "
                    "(trainkit.get_context().get_world_rank(), get_world_size()), not the local rank or node")




def _both_at_once(fn: Any, name: str) -> None:
    """``fn(0)`` and ``fn(1)`` in two threads started together; returns once both ended."""
    import threading

    threads = [threading.Thread(target=fn, args=(i,), name=f"{name}{i}") for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _assert_resources_released(ray: Any, timeout_s: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while (free := ray.available_resources().get("CPU", 0)) < (total := ray.cluster_resources()["CPU"]):
        if time.monotonic() > deadline:
            raise AssertionError(f"{total - free} CPUs still held {timeout_s}s after fit() returned")
        time.sleep(0.05)

