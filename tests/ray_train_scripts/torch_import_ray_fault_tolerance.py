"""`import ray` (and `import ray.train.torch`, which makes `ray.train` an attribute), `ray.init()` and
`ray.train.X(...)` throughout: a worker crashes once, FailureConfig
restarts the group, the training function resumes from ray.train.get_checkpoint()."""

import json
import os
import tempfile

import torch

import ray
import ray.train.torch


def train_func(config):
    model = torch.nn.Linear(2, 1)
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as path:
            model.load_state_dict(torch.load(os.path.join(path, "model.pt")))
            start = json.load(open(os.path.join(path, "state.json")))["step"] + 1
    model = ray.train.torch.prepare_model(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(start, 6):
        if step == 3:
            torch.distributed.barrier()  # step 2's report() returned on every rank before the crash below
        if step == 3 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError("worker crashed")
        x = torch.randn(8, 2)
        loss = ((model(x).squeeze(1) - x.sum(1)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with tempfile.TemporaryDirectory() as tmp:
            torch.save(model.module.state_dict(), os.path.join(tmp, "model.pt"))
            json.dump({"step": step}, open(os.path.join(tmp, "state.json"), "w"))
            ray.train.report({"step": step, "start": start, "loss": loss.item()},
                             checkpoint=ray.train.Checkpoint.from_directory(tmp))


if __name__ == "__main__":
    ray.init(num_cpus=2)
    trainer = ray.train.torch.TorchTrainer(
        train_func,
        train_loop_config={"marker": os.path.abspath("crashed_once")},
        scaling_config=ray.train.ScalingConfig(num_workers=2),
        run_config=ray.train.RunConfig(
            name="torch_import_ray_fault_tolerance",
            failure_config=ray.train.FailureConfig(max_failures=1),
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2)),
    )
    result = trainer.fit()
    assert os.path.exists("crashed_once")
    assert result.metrics["step"] == 5 and result.metrics["start"] == 3, result.metrics  # resumed after step 2
    with result.checkpoint.as_directory() as path:
        assert json.load(open(os.path.join(path, "state.json")))["step"] == 5
    assert len(result.best_checkpoints) == 2
    ray.shutdown()
    print("resumed at step", result.metrics["start"])
