"""A stuck DDP run names the rank to look at: the one that is not waiting in a collective."""

import json
import os
import time

import pytest

import trainkit
from trainkit import FailureConfig, ScalingConfig, TrainingFailedError

TWO = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})


def rank_one_sleeps_while_rank_zero_all_reduces(config):
    import torch
    import torch.distributed as dist

    trainkit.report({"step": 0})
    if trainkit.get_context().get_world_rank() == 1:
        open(config["marker"], "w").write(str(time.time()))
        time.sleep(3600)  # asleep in user code
    dist.all_reduce(torch.ones(1))  # rank 0 waits here for rank 1


def test_stuck_ddp_names_the_rank_not_in_a_collective(ray_cluster, run_config, tmp_path):
    pytest.importorskip("trainkit_torch")
    from trainkit_torch import TorchConfig, TorchTrainer

    marker = str(tmp_path / "asleep")
    config = run_config(failure_config=FailureConfig(max_failures=0, progress_timeout_s=3))
    with pytest.raises(TrainingFailedError) as caught:
        TorchTrainer(rank_one_sleeps_while_rank_zero_all_reduces, train_loop_config={"marker": marker},
                     torch_config=TorchConfig(backend="gloo"), scaling_config=TWO, run_config=config).fit()
    state = json.load(open(os.path.join(config.storage_path, config.name, "run_state.json")))
    failure = state["failures"][0]
    assert failure["type"] == "WorkerStuck" and failure["rank"] == 1, failure
    assert "rank 1" in failure["message"] and "not in a collective" in failure["message"], failure["message"]
    assert "rank 0" in failure["message"] and "waiting in a collective" in failure["message"]
    assert "time.sleep" in str(caught.value) or "in rank_one_sleeps" in str(caught.value)
