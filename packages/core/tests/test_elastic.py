"""Elastic training on a 2-node Ray cluster simulated with ray.cluster_utils.Cluster: a node is
removed mid-run (the run shrinks to the workers that fit and resumes from its last checkpoint),
then a node is added (the run grows back at the next resize check)."""

import json
import os
import tempfile
import time

import pytest

import trainkit
from trainkit import Checkpoint, DataParallelTrainer, FailureConfig, ScalingConfig
from trainkit.testing import simulated_cluster


@pytest.fixture
def two_nodes():
    # dead nodes are noticed within ~1 s, not Ray's default ~30 s
    fast_health_checks = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                          "health_check_failure_threshold": 2}
    with simulated_cluster(head_cpus=1, system_config=fast_health_checks) as cluster:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster


def count_epochs(config):
    checkpoint, epoch = trainkit.get_checkpoint(), 0
    if checkpoint:
        with checkpoint.as_directory() as directory:
            epoch = json.load(open(os.path.join(directory, "state.json")))["epoch"] + 1
    context = trainkit.get_context()
    while not os.path.exists(config["stop_file"]):  # the test says when it has seen the whole trace
        time.sleep(0.3)  # a training step
        with tempfile.TemporaryDirectory() as directory:
            if context.get_world_rank() == 0:
                json.dump({"epoch": epoch}, open(os.path.join(directory, "state.json"), "w"))
            trainkit.report({"epoch": epoch, "world_size": context.get_world_size(),
                             "rank": context.get_world_rank()},
                            checkpoint=Checkpoint.from_directory(directory) if context.get_world_rank() == 0 else None)
        epoch += 1


class LoseThenRegainANode(trainkit.UserCallback):
    def __init__(self, cluster, stop_file):
        self.cluster, self.stop_file, self.trace, self.removed_at, self.added = cluster, stop_file, [], None, False

    def after_report(self, run_context, metrics, checkpoint):
        epoch, size = metrics[0]["epoch"], metrics[0]["world_size"]
        assert [m["rank"] for m in metrics] == list(range(size))  # contiguous ranks at every size
        self.trace.append((epoch, size))
        if size == 2 and epoch >= 2 and self.removed_at is None:
            self.removed_at = epoch
            self.cluster.remove_node(next(iter(self.cluster.worker_nodes)), allow_graceful=False)  # a set
        elif size == 1 and epoch >= self.removed_at + 3 and not self.added:
            self.added = True
            self.cluster.add_node(num_cpus=1)
        elif size == 2 and self.added and [s for _, s in self.trace[-3:]] == [2, 2, 2]:
            open(self.stop_file, "w").close()  # grown back and trained 3 epochs at full size


def test_shrinks_when_a_node_is_lost_and_grows_back(two_nodes, run_config, tmp_path):
    callback = LoseThenRegainANode(two_nodes, str(tmp_path / "stop"))
    result = DataParallelTrainer(
        count_epochs, train_loop_config={"stop_file": callback.stop_file},
        scaling_config=ScalingConfig(num_workers=(1, 2), elastic_resize_monitor_interval_s=1.0),
        run_config=run_config(callbacks=[callback], failure_config=FailureConfig(max_failures=2))).fit()

    sizes = [size for _, size in callback.trace]
    trace = [s for i, s in enumerate(sizes) if i == 0 or s != sizes[i - 1]]
    print("world-size trace:", " -> ".join(map(str, trace)), "| (epoch, size):", callback.trace)
    assert trace == [2, 1, 2]
    epochs = [epoch for epoch, _ in callback.trace]
    assert sorted(set(epochs)) == list(range(max(epochs) + 1))  # every epoch trained, none skipped
    for before, after in zip(epochs, epochs[1:]):
        assert after <= before + 1  # each resize resumed from a checkpoint, never ahead of it
    assert result.metrics["epoch"] == max(epochs) and result.metrics["world_size"] == 2
    with open(os.path.join(result.path, "run_state.json")) as f:
        assert json.load(f)["world_sizes"] == [2, 1, 2]  # each attempt's size, as `trainkit show` prints it
