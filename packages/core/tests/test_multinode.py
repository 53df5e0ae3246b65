"""Ranks on a 2-node cluster simulated with ray.cluster_utils.Cluster."""

import pytest

import trainkit
from trainkit import DataParallelTrainer, ScalingConfig
from trainkit.testing import simulated_cluster


@pytest.fixture(scope="module")
def two_node_cluster():
    with simulated_cluster(head_cpus=2) as cluster:
        cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        yield cluster


def where_am_i():
    import ray

    ctx = trainkit.get_context()
    trainkit.report({"rank": ctx.get_world_rank(), "local_rank": ctx.get_local_rank(),
                     "local_world_size": ctx.get_local_world_size(), "node_rank": ctx.get_node_rank(),
                     "node_id": ray.get_runtime_context().get_node_id()})


class Collect(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        self.metrics = metrics


@pytest.mark.parametrize("strategy", ["SPREAD", "PACK"])
def test_ranks_are_contiguous_per_node(two_node_cluster, run_config, strategy):
    collect = Collect()
    DataParallelTrainer(where_am_i, scaling_config=ScalingConfig(num_workers=4 if strategy == "SPREAD" else 2,
                                                                 placement_strategy=strategy),
                        run_config=run_config(callbacks=[collect])).fit()
    rows = collect.metrics
    assert [r["rank"] for r in rows] == list(range(len(rows)))
    nodes = [r["node_id"] for r in rows]
    if strategy == "SPREAD":  # 4 workers over 2 nodes: 2 per node, ranks 0-1 on node 0, 2-3 on node 1
        assert len(set(nodes)) == 2 and nodes[0] == nodes[1] and nodes[2] == nodes[3]
        assert [r["node_rank"] for r in rows] == [0, 0, 1, 1]
        assert [r["local_rank"] for r in rows] == [0, 1, 0, 1]
        assert {r["local_world_size"] for r in rows} == {2}
    else:  # 2 workers packed on one node
        assert len(set(nodes)) == 1 and [r["local_rank"] for r in rows] == [0, 1]


def rendezvous_node_when_the_far_rank_starts_it():
    """Rank 1 (not on the driver's node) makes the attempt's first collective call and so starts its
    rendezvous actor; rank 0 calls once the actor exists. Every rank reports the actor's node."""
    import time

    import ray

    from trainkit import collective

    ctx = trainkit.get_context()
    name = collective.rendezvous_name(ctx.get_experiment_name(), ctx.get_attempt())
    if ctx.get_world_rank() == 0:
        while True:  # until rank 1 started it (no timing: the test hangs, not passes, if it never does)
            try:
                ray.get_actor(name)
                break
            except ValueError:
                time.sleep(0.05)
    collective.barrier()
    actor = ray.get_actor(name)
    trainkit.report({"rendezvous_node": ray.get(actor.__ray_call__.remote(
        lambda self: ray.get_runtime_context().get_node_id())),
        "node_id": ray.get_runtime_context().get_node_id()})


def test_the_rendezvous_actor_lives_on_the_drivers_node(two_node_cluster, run_config):
    """A collective's actor started by a rank on another node still lives on the driver's node (each
    node's CPUs all taken: Ray's own choice then leaves the driver's node). A rank's node can be
    drained, preempted or partitioned away (CI: the actor of a drained spot node's run, placed there
    by its rank, died with it and failed the next attempt); the driver's cannot without ending the run."""
    import ray

    collect = Collect()
    DataParallelTrainer(rendezvous_node_when_the_far_rank_starts_it,
                        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 2},
                                                     placement_strategy="STRICT_SPREAD"),
                        run_config=run_config(callbacks=[collect])).fit()
    driver_node = ray.get_runtime_context().get_node_id()
    rows = collect.metrics
    assert rows[0]["node_id"] == driver_node and rows[1]["node_id"] != driver_node
    assert {r["rendezvous_node"] for r in rows} == {driver_node}
