"""The conformance suites' probes that need a driver of their own: run as
``python -m trainkit.testing._probes SPEC OUT``, where SPEC is a cloudpickled dict (the suite
instance and what to run) and OUT the JSON file the results go to.

``beside``: a run of trainkit's own backend (no framework) with the plugin installed, as the
state of each worker's process; the suite runs it twice, the plugin enabled and disabled.

``multinode``: the plugin's training on two simulated nodes of this machine whose node addresses
are 127.0.0.2 and 127.0.0.3 (every address of 127.0.0.0/8 is this machine's loopback on Linux; the
driver's head node, 127.0.0.1, runs no rank). Each rank reports its ranks, its node's address, what
the framework says, the rows the plugin's data helper gives it, and the TCP connections its process
(and its children) hold, after ``Backend.on_start`` and in the training function: two ranks on
different nodes that talk through 127.0.0.1 would each reach their own host on two machines. Where
this machine's hostname resolves to 127.0.0.1, a framework's own default bind address (gloo binds the
hostname's) is 127.0.0.1 too, although on real hosts it is not: then only the ports the worker group
handed the backend (``free_address``, ``free_ports``, ``rendezvous``) are judged.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

NODE_IPS = ("127.0.0.2", "127.0.0.3")
SHARD_ROWS = 12  # the dataset the data helper shards: rows 0..11


def connections() -> list[list]:
    """This process's and its descendants' established TCP connections: [pid, local ip, local port,
    remote ip, remote port]."""
    import psutil

    me = psutil.Process()
    found = []
    for process in [me, *me.children(recursive=True)]:
        try:
            conns = process.net_connections(kind="tcp")
        except (psutil.Error, AttributeError):
            try:
                conns = process.connections(kind="tcp")
            except psutil.Error:
                continue
        found += [[process.pid, c.laddr.ip, c.laddr.port, c.raddr.ip, c.raddr.port] for c in conns
                  if c.raddr and c.status == psutil.CONN_ESTABLISHED]
    return found


def listening() -> list[list]:
    """[pid, port] of every TCP socket this process and its descendants listen on."""
    import psutil

    me = psutil.Process()
    found = []
    for process in [me, *me.children(recursive=True)]:
        try:
            found += [[process.pid, c.laddr.port] for c in process.net_connections(kind="tcp")
                      if c.status == psutil.CONN_LISTEN]
        except psutil.Error:
            continue
    return found


def _where() -> dict[str, Any]:
    import ray

    import trainkit

    ctx = trainkit.get_context()
    return {"world_rank": ctx.get_world_rank(), "node_ip": ray.util.get_node_ip_address(),
            "connections": connections(), "listening": listening()}


def multinode_fn(config: dict) -> None:
    import ray

    import trainkit

    ctx = trainkit.get_context()
    rank = ctx.get_world_rank()
    gathered = [float(v) for v in config["all_gather"](float(rank))]
    metrics = {"world_rank": rank, "local_rank": ctx.get_local_rank(), "node_rank": ctx.get_node_rank(),
               "world_size": ctx.get_world_size(), "node_ip": ray.util.get_node_ip_address(),
               "framework_rank": int(config["framework_rank"]()), "gathered": gathered,
               "connections": connections(), "listening": listening()}
    if config.get("shard") is not None:
        metrics["rows"] = [int(r) for r in config["shard"](list(range(SHARD_ROWS)))]
    trainkit.report(metrics)


def _record_handed_ports(ports: list) -> None:
    """Every port the worker group hands the backend (free_address, free_ports, rendezvous) goes to ``ports``."""
    from trainkit._internal.worker.worker_group import WorkerGroup

    free_address, free_ports, rendezvous = WorkerGroup.free_address, WorkerGroup.free_ports, WorkerGroup.rendezvous

    def recorded_free_address(self, rank: int = 0, hold: bool = False):
        host, port = free_address(self, rank, hold)
        ports.append(port)
        return host, port

    def recorded_free_ports(self, count: int = 1, hold: bool = False):
        offers = free_ports(self, count, hold)
        ports.extend(port for _, offered in offers for port in offered)
        return offers

    def recorded_rendezvous(self, listen: bool = False):
        ranks = rendezvous(self, listen)
        ports.extend(r.master_port for r in ranks[:1])
        return ranks

    WorkerGroup.free_address, WorkerGroup.free_ports = recorded_free_address, recorded_free_ports
    WorkerGroup.rendezvous = recorded_rendezvous


def _multinode(suite: Any, out: dict) -> None:
    import ray
    from ray.cluster_utils import Cluster

    import trainkit

    backend_cls = suite.backend_config.backend_cls
    on_start = backend_cls.on_start

    def probed_on_start(backend, worker_group, backend_config) -> None:  # the connections the rendezvous left
        # what the workers listened on before the backend started: Ray's own servers, not the framework's
        out["listening_before"] = [port for ports in worker_group.execute(listening) for port in ports]
        on_start(backend, worker_group, backend_config)
        out["after_on_start"] = worker_group.execute(_where)

    backend_cls.on_start = probed_on_start
    _record_handed_ports(out.setdefault("handed_ports", []))
    try:  # where this machine's hostname resolves: a framework's default bind address (gloo's)
        out["hostname_address"] = socket.gethostbyname(socket.gethostname())
    except OSError:
        out["hostname_address"] = None
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "node_ip_address": "127.0.0.1"})
    try:
        for ip in NODE_IPS:  # PACK fills 127.0.0.2 first: rank 0 is there, the driver's node holds none
            cluster.add_node(num_cpus=-(-suite.num_workers // len(NODE_IPS)), node_ip_address=ip)
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False, namespace="trainkit")
        cluster.wait_for_nodes()

        class Collect(trainkit.UserCallback):
            def after_report(self, run_context, metrics, checkpoint) -> None:
                out.setdefault("reports", []).append(metrics)

        from trainkit.testing._conformance.hooks import given_hook

        config = suite._config(shard=given_hook(type(suite), "shard"))
        run_config = trainkit.RunConfig(name="multinode", storage_path=out.pop("storage"), verbose=0,
                                        callbacks=[Collect()])
        try:
            suite.trainer(multinode_fn, run_config, config).fit()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        ray.shutdown()
        cluster.shutdown()


def beside_fn(config: dict) -> None:
    """What a worker's process looks like inside a run: environment, threads (digits masked), logging."""
    import logging
    import re
    import threading

    import trainkit

    trainkit.report({"env": dict(os.environ),
                     "threads": sorted({re.sub(r"\d+", "N", t.name) for t in threading.enumerate()}),
                     "logging": [logging.getLevelName(logging.root.level),
                                 sorted(type(h).__name__ for h in logging.root.handlers)]})


def _beside(suite: Any, out: dict) -> None:
    """A run of trainkit's own backend (no framework) on 2 workers of a fresh local Ray: each rank's
    process state, and what the run changed in the driver's environment."""
    import ray

    import trainkit

    ray.init(num_cpus=2, logging_level="ERROR", log_to_driver=False, namespace="trainkit", include_dashboard=False)
    try:
        class Collect(trainkit.UserCallback):
            def after_report(self, run_context, metrics, checkpoint) -> None:
                out.setdefault("reports", []).append(metrics)

        before = dict(os.environ)
        run_config = trainkit.RunConfig(name="beside", storage_path=out.pop("storage"), verbose=0,
                                        callbacks=[Collect()])
        trainkit.DataParallelTrainer(beside_fn, scaling_config=trainkit.ScalingConfig(num_workers=2),
                                     run_config=run_config).fit()
        after = dict(os.environ)
        out["driver_env"] = {k: [before.get(k), after.get(k)] for k in before.keys() | after.keys()
                             if before.get(k) != after.get(k)}
    finally:
        ray.shutdown()


def main(spec_path: str, out_path: str) -> None:
    # single-machine mode before Ray is imported: the nodes keep their loopback addresses
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    from ray import cloudpickle

    with open(spec_path, "rb") as f:
        spec = cloudpickle.load(f)
    out: dict[str, Any] = {"storage": spec["storage"]}
    try:
        {"multinode": _multinode, "beside": _beside}[spec["probe"]](spec["suite"], out)
    finally:
        with open(out_path, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
