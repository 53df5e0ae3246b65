"""trainkit.collective across real workers, with no framework backend."""

import time

import pytest

import trainkit
from trainkit import DataParallelTrainer, ScalingConfig, collective


class Collect(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        self.metrics = metrics


def run(fn, run_config, num_workers=2, **kwargs):
    collect = Collect()
    result = DataParallelTrainer(fn, scaling_config=ScalingConfig(num_workers=num_workers),
                                 run_config=run_config(callbacks=[collect], **kwargs)).fit()
    return collect.metrics, result


def broadcast_and_barrier():
    rank = trainkit.get_context().get_world_rank()
    plans = [collective.broadcast_from_rank_zero({"seed": 1234, "from": rank} if rank == 0 else {"from": rank})
             for _ in range(3)]
    if rank == 1:
        time.sleep(1.5)  # late: the others must wait for this rank at the barrier
    arrived = time.time()
    collective.barrier()
    trainkit.report({"plans": plans, "arrived": arrived, "left_barrier": time.time()})


def test_broadcast_and_barrier_across_workers(ray_cluster, run_config):
    rows, _ = run(broadcast_and_barrier, run_config, num_workers=3)
    assert all(r["plans"] == [{"seed": 1234, "from": 0}] * 3 for r in rows)  # rank 0's value on every rank
    last_arrival = max(r["arrived"] for r in rows)  # rank 1's, 1.5 s late
    assert all(r["left_barrier"] >= last_arrival for r in rows)  # nobody left the barrier before it


def one_rank_skips_the_barrier():
    if trainkit.get_context().get_world_rank() == 0:
        collective.barrier(timeout_s=2)
    trainkit.report({})


def test_a_rank_that_never_arrives_is_named(ray_cluster, run_config):
    with pytest.raises(trainkit.TrainingFailedError, match=r"rank\(s\) \[1\] did not arrive within 2 s"):
        run(one_rank_skips_the_barrier, run_config)


def test_local_mode_returns_at_once(run_config):
    def fn():
        collective.barrier()
        trainkit.report({"value": collective.broadcast_from_rank_zero(7)})

    rows, _ = run(fn, run_config, num_workers=0)
    assert rows == [{"value": 7}]


def test_outside_a_training_function_it_says_where_it_works():
    with pytest.raises(RuntimeError, match=r"collective.barrier\(\) can only be called inside a training function"):
        collective.barrier()
