"""`import ray.train as train` with `train.torch.*` attribute access: the train context's ranks and
names, get_device, enable_reproducibility, and a ray.train.UserCallback on the driver."""

import os
import tempfile

import torch

import ray.train as train
import ray.train.torch  # noqa: F401 - makes train.torch an attribute
from ray.train import UserCallback


class CountReports(UserCallback):
    """Runs where Ray Train's controller runs: it counts in a file, not in the driver's memory."""

    def __init__(self, path):
        self.path = path

    def after_report(self, run_context, metrics, checkpoint):
        with open(self.path, "a") as f:
            f.write(f"{len(metrics)}\n")  # one metrics dict a worker


def train_func():
    train.torch.enable_reproducibility(seed=0)
    context = train.get_context()
    device = train.torch.get_device()
    model = train.torch.prepare_model(torch.nn.Linear(3, 1))
    out = model(torch.ones(2, 3, device=device))
    with tempfile.TemporaryDirectory() as tmp:  # Ray Train's result.metrics are its last checkpoint's
        torch.save(model.state_dict(), os.path.join(tmp, "model.pt"))
        train.report({"world_rank": context.get_world_rank(), "world_size": context.get_world_size(),
                      "local_rank": context.get_local_rank(), "local_world_size": context.get_local_world_size(),
                      "node_rank": context.get_node_rank(), "experiment": context.get_experiment_name(),
                      "device": str(device), "out_rows": out.shape[0]}, checkpoint=train.Checkpoint.from_directory(tmp))


if __name__ == "__main__":
    counter = CountReports(os.path.abspath("reports.txt"))
    result = train.torch.TorchTrainer(
        train_func,
        torch_config=train.torch.TorchConfig(backend="gloo"),
        scaling_config=train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        run_config=train.RunConfig(name="torch_context_device", callbacks=[counter]),
    ).fit()
    assert result.metrics == {"world_rank": 0, "world_size": 2, "local_rank": 0, "local_world_size": 2,
                              "node_rank": 0, "experiment": "torch_context_device", "device": "cpu",
                              "out_rows": 2}, result.metrics
    assert open("reports.txt").read() == "2\n"
    print(result.metrics)
