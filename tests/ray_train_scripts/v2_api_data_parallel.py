"""Ray Train V2's module paths (ray.train.v2.api.*) for a framework-free DataParallelTrainer, with
ray.train.collective and Result.from_path."""

import tempfile

from ray.train.collective import barrier, broadcast_from_rank_zero
from ray.train.v2.api.config import RunConfig, ScalingConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
from ray.train.v2.api.result import Result
from ray.train.v2.api.train_fn_utils import get_checkpoint, get_context, report

import ray.train


def train_fn(config):
    assert get_checkpoint() is None
    context = get_context()
    seed = broadcast_from_rank_zero({"seed": 1234} if context.get_world_rank() == 0 else None)
    barrier()
    for step in range(config["steps"]):
        with tempfile.TemporaryDirectory() as tmp:
            open(f"{tmp}/step", "w").write(str(step))
            report({"step": step, "seed": seed["seed"], "world_size": context.get_world_size()},
                   checkpoint=ray.train.Checkpoint.from_directory(tmp))


if __name__ == "__main__":
    result = DataParallelTrainer(
        train_fn,
        train_loop_config={"steps": 3},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="v2_api_data_parallel"),
    ).fit()
    assert result.metrics == {"step": 2, "seed": 1234, "world_size": 2}, result.metrics
    restored = Result.from_path(result.path)
    assert restored.metrics["step"] == 2 and restored.checkpoint is not None
    with restored.checkpoint.as_directory() as path:
        assert open(f"{path}/step").read() == "2"
    print("restored from", result.path)
