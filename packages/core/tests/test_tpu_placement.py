"""TPU slices are placed whole, on a Ray cluster simulated with ray.cluster_utils.Cluster whose nodes
advertise what Ray's TPU detection gives real TPU hosts: a "TPU" resource per chip, the slice head
resource on worker 0, and the ``ray.io/tpu-*`` node labels. No TPU is needed: this is Ray's own
scheduler deciding where workers go."""

import pytest
import trainkit
from trainkit import DataParallelTrainer, ScalingConfig
from trainkit._internal.worker import worker_group
from trainkit.testing import requires, simulated_cluster

pytestmark = requires(ray=">=2.50")  # bundle label selectors, respected since Ray 2.50 (ray-project/ray#55590)

SLICES = ("slice-a", "slice-b")  # two v4 2x2x2 slices: 8 chips each, 2 hosts of 4 chips
V4_SLICE = {"use_tpu": True, "topology": "2x2x2", "accelerator_type": "TPU-V4"}


@pytest.fixture(scope="module")
def tpu_cluster():
    with simulated_cluster(head_cpus=1) as cluster:
        for name in SLICES:
            for worker_id in range(2):
                resources = {"TPU": 4, "accelerator_type:TPU-V4": 1,
                             **({"TPU-v4-16-head": 1} if worker_id == 0 else {})}
                cluster.add_node(num_cpus=1, resources=resources, labels={
                    "ray.io/tpu-slice-name": name, "ray.io/tpu-worker-id": str(worker_id),
                    "ray.io/tpu-pod-type": "v4-16", "ray.io/tpu-topology": "2x2x2"})
        cluster.wait_for_nodes()
        yield cluster


@pytest.fixture
def busy_hosts(tpu_cluster):
    """``busy_hosts(("slice-a", 1), ...)`` occupies those hosts' chips with an idle actor."""
    import ray

    @ray.remote(num_cpus=0, resources={"TPU": 4})
    class Occupant:
        def ready(self):
            return True

    occupants = []

    def occupy(*hosts):
        for name, worker_id in hosts:
            actor = Occupant.options(label_selector={"ray.io/tpu-slice-name": name,
                                                     "ray.io/tpu-worker-id": str(worker_id)}).remote()
            ray.get(actor.ready.remote(), timeout=30)
            occupants.append(actor)

    yield occupy
    for actor in occupants:
        ray.kill(actor)


def where_am_i():
    import os

    import ray

    runtime = ray.get_runtime_context()
    labels = runtime.get_node_labels()
    trainkit.report({"rank": trainkit.get_context().get_world_rank(), "slice": labels["ray.io/tpu-slice-name"],
                     "host": int(labels["ray.io/tpu-worker-id"]), "chips": len(runtime.get_accelerator_ids()["TPU"]),
                     "megascale": {k: v for k, v in os.environ.items() if k.startswith("MEGASCALE_")}})


class Collect(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        self.metrics = metrics


def placed(run_config, num_workers):
    collect = Collect()
    DataParallelTrainer(where_am_i, scaling_config=ScalingConfig(num_workers=num_workers, **V4_SLICE),
                        run_config=run_config(callbacks=[collect])).fit()
    return collect.metrics


def test_a_slice_is_used_whole_or_not_at_all(tpu_cluster, busy_hosts, run_config):
    busy_hosts(("slice-a", 1))  # slice-a has a free host, but not two: the run must take slice-b
    rows = placed(run_config, 2)
    print("placed:", [(r["rank"], r["slice"], r["host"]) for r in rows])
    assert [(r["slice"], r["host"]) for r in rows] == [("slice-b", 0), ("slice-b", 1)]  # ranks follow host ids
    assert {r["chips"] for r in rows} == {4} and all(not r["megascale"] for r in rows)  # one slice: no MEGASCALE


def test_two_half_busy_slices_are_not_mixed_into_one(tpu_cluster, busy_hosts, run_config, monkeypatch):
    # slice-a's host 0 and slice-b's host 1 are free: enough chips for 2 workers, but no whole slice
    busy_hosts(("slice-a", 1), ("slice-b", 0))
    monkeypatch.setattr(worker_group, "PLACEMENT_TIMEOUT_S", 3.0)
    with pytest.raises(trainkit.TrainingFailedError, match=r"PlacementError: .*whole TPU slices: 0 of 1 whole TPU slice\(s\) v4-16"):
        placed(run_config, 2)


def test_two_slices_get_contiguous_ranks_and_multislice_env(tpu_cluster, run_config):
    rows = placed(run_config, 4)
    print("placed:", [(r["rank"], r["slice"], r["host"], r["megascale"]["MEGASCALE_SLICE_ID"]) for r in rows])
    slices = [r["slice"] for r in rows]
    assert slices[0] == slices[1] != slices[2] == slices[3]  # ranks 0-1 on one slice, 2-3 on the other
    assert [r["host"] for r in rows] == [0, 1, 0, 1]
    assert [r["megascale"]["MEGASCALE_SLICE_ID"] for r in rows] == ["0", "0", "1", "1"]
    assert {r["megascale"]["MEGASCALE_NUM_SLICES"] for r in rows} == {"2"}
    assert len({r["megascale"]["MEGASCALE_COORDINATOR_ADDRESS"] for r in rows}) == 1


def test_more_slices_than_the_cluster_has_fail_with_a_clear_error(tpu_cluster, run_config, monkeypatch):
    monkeypatch.setattr(worker_group, "PLACEMENT_TIMEOUT_S", 3.0)
    with pytest.raises(trainkit.TrainingFailedError, match=r"PlacementError: .*2 of 3 whole TPU slice\(s\) v4-16 were free"):
        placed(run_config, 6)
