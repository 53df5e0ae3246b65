"""A node that stops answering before Ray marks it dead (a network cut: Ray's health checks take
~30 s, and a cut that heals never ends in a death): the restart places no worker there. Simulated
on a 2-node ``ray.cluster_utils.Cluster``: the far node's raylet is SIGSTOPped (it answers nothing,
as across a cut, and Ray's health checks are told to wait it out) and its rank SIGKILLed (the driver's
next call to it fails: ``ActorUnavailableError``). tests/multihost does it with a real partition."""

import json
import os
import signal

import pytest

import trainkit
from trainkit import DataParallelTrainer, FailureConfig, ScalingConfig
from trainkit.testing import simulated_cluster


@pytest.fixture
def two_nodes():
    # Ray never marks the far node dead during the test: the cut is all a restart knows of
    with simulated_cluster(head_cpus=1, system_config={"health_check_failure_threshold": 100000}) as cluster:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster


def where_then_hold():
    import time

    import ray

    ctx = trainkit.get_context()
    trainkit.report({"attempt": ctx.get_attempt(), "node_id": ray.get_runtime_context().get_node_id(),
                     "pid": os.getpid()})
    while ctx.get_attempt() == 0:  # the first attempt ends around it
        time.sleep(0.1)


class CutOffRank1(trainkit.UserCallback):
    """At attempt 0's report: stops the far node's raylet and kills rank 1's process there."""

    def __init__(self, cluster):
        self.cluster, self.attempts, self.raylet = cluster, [], None

    def after_report(self, run_context, metrics, checkpoint):
        self.attempts.append(metrics)
        if metrics[0]["attempt"] == 0:
            far = next(n for n in self.cluster.worker_nodes if n.node_id == metrics[1]["node_id"])
            self.raylet = far.all_processes["raylet"][0].process.pid
            os.kill(self.raylet, signal.SIGSTOP)
            os.kill(metrics[1]["pid"], signal.SIGKILL)


def test_a_restart_places_no_worker_on_a_node_whose_rank_stopped_answering(two_nodes, run_config, monkeypatch):
    import ray

    from trainkit._internal.worker import worker_group

    # without the node left out, the restart's placement waits on the stopped raylet until this
    # limit, and the run (no failure left) fails
    monkeypatch.setattr(worker_group, "PLACEMENT_TIMEOUT_S", 30)
    cut = CutOffRank1(two_nodes)
    try:
        result = DataParallelTrainer(
            where_then_hold,
            scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}, placement_strategy="SPREAD"),
            run_config=run_config(callbacks=[cut], failure_config=FailureConfig(max_failures=1))).fit()
    finally:
        if cut.raylet:
            os.kill(cut.raylet, signal.SIGCONT)
    head = ray.get_runtime_context().get_node_id()
    first, restart = cut.attempts
    assert [r["node_id"] == head for r in first] == [True, False]  # one rank on each node
    assert {r["node_id"] for r in restart} == {head}
    with result.filesystem.open_input_stream(f"{result.path}/run_state.json") as f:
        [failure] = json.load(f)["failures"]
    assert failure["rank"] == 1 and "unreachable" in failure["message"], failure
