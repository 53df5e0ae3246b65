"""Accelerate's own loop on 2 real trainkit workers: ``Accelerator()`` with no arguments is
distributed over trainkit's process group, and ``prepare`` really shards the data."""

import trainkit
from trainkit import ScalingConfig
from trainkit.testing import requires
from trainkit_torch import TorchTrainer

ROWS, BATCH, EPOCHS = 64, 8, 2


def accelerate_fn():
    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, TensorDataset

    accelerator = Accelerator()  # nothing distributed-specific: trainkit's environment is enough
    torch.manual_seed(accelerator.process_index)  # different initial weights: prepare must sync them
    x = torch.randn(ROWS, 4, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(torch.arange(ROWS), x, x.sum(dim=1, keepdim=True)), batch_size=BATCH, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    for epoch in range(EPOCHS):
        seen, batches, total = [], 0, 0.0
        for index, xb, yb in data:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            seen.append(index)
            batches += 1
            total += loss.item()
        every_index = accelerator.gather(torch.cat(seen)).tolist()
        weights = accelerator.gather(torch.cat([p.detach().flatten() for p in model.parameters()])[None])
        trainkit.report({"epoch": epoch, "batches": batches, "loss": total / batches,
                         "rows_seen_once": float(sorted(every_index) == list(range(ROWS))),
                         "replicas_equal": float(torch.allclose(weights[0], weights[1])),
                         "num_processes": accelerator.num_processes,
                         "multi_cpu": float(accelerator.distributed_type.name == "MULTI_CPU")})


def test_accelerator_is_distributed_over_trainkits_workers(ray_cluster, run_config):
    result = TorchTrainer(accelerate_fn, scaling_config=ScalingConfig(num_workers=2), run_config=run_config()).fit()
    history = result.metrics_dataframe
    assert list(history["num_processes"]) == [2, 2] and list(history["multi_cpu"]) == [1.0, 1.0]
    assert list(history["batches"]) == [4, 4]  # 64 rows / 2 ranks / batches of 8 (8 in one process)
    assert list(history["rows_seen_once"]) == [1.0, 1.0]  # the shards cover the data exactly once
    assert list(history["replicas_equal"]) == [1.0, 1.0]
    assert history["loss"].iloc[1] < history["loss"].iloc[0]


def accelerate_deepspeed_fn():
    import torch
    from accelerate import Accelerator, DeepSpeedPlugin
    from torch.utils.data import DataLoader, TensorDataset

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2))
    x = torch.randn(ROWS, 4, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=BATCH)
    model = torch.nn.Linear(4, 1)
    model, optimizer, data = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=0.05), data)
    losses = []
    for xb, yb in data:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    trainkit.report({"deepspeed": float(accelerator.distributed_type.name == "DEEPSPEED"),
                     "num_processes": accelerator.num_processes, "batches": len(losses),
                     "zero_stage": model.zero_optimization_stage(), "improved": float(losses[-1] < losses[0])})


@requires(deepspeed=">=0.16", gpus=2)  # Accelerate has no DeepSpeed backend on CPUs: one process each
def test_accelerate_deepspeed_plugin_runs_on_trainkits_workers(ray_cluster, run_config):
    result = TorchTrainer(accelerate_deepspeed_fn, scaling_config=ScalingConfig(num_workers=2, use_gpu=True),
                          run_config=run_config()).fit()
    assert result.metrics == {"deepspeed": 1.0, "num_processes": 2, "batches": 4, "zero_stage": 2, "improved": 1.0}
