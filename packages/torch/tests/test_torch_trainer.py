"""TorchTrainer on 2 real Ray workers with a gloo process group."""

import os

import pytest
import torch
import trainkit
from trainkit import ScalingConfig
from trainkit.testing import requires
from trainkit_torch import TorchConfig, TorchTrainer, get_device, prepare_data_loader, prepare_model


def ddp_fn(config):
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    ctx = trainkit.get_context()
    rank = ctx.get_world_rank()
    ranks = torch.tensor([float(rank)])
    dist.all_reduce(ranks)
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(4, 1))
    dataset = TensorDataset(torch.arange(40, dtype=torch.float32).reshape(10, 4), torch.arange(10.0))
    loader = prepare_data_loader(DataLoader(dataset, batch_size=5, shuffle=True))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    seen = []
    for _epoch in range(2):
        order = []
        for x, y in loader:
            order += y.tolist()
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x).squeeze(1), y).backward()
            optimizer.step()
        seen.append(order)
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    trainkit.report({"rank": rank, "rank_sum": ranks.item(), "seen": seen, "params": params.tolist(),
                     "wrapped": type(model).__name__, "backend": dist.get_backend(),
                     "device": str(get_device())})


class Collect(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        self.metrics = metrics


def test_ddp_on_two_workers_communicates_and_shards(ray_cluster, run_config):
    collect = Collect()
    TorchTrainer(ddp_fn, scaling_config=ScalingConfig(num_workers=2),
                 run_config=run_config(callbacks=[collect])).fit()
    r0, r1 = collect.metrics
    assert r0["rank_sum"] == r1["rank_sum"] == 1.0  # a real all-reduce across the two workers
    assert r0["backend"] == "gloo" and r0["wrapped"] == "DistributedDataParallel" and r0["device"] == "cpu"
    assert r0["params"] == r1["params"]  # different data per rank, identical replicas after DDP steps
    for epoch in range(2):  # each epoch: disjoint shards that cover the data set
        assert sorted(r0["seen"][epoch] + r1["seen"][epoch]) == list(range(10))
    assert r0["seen"][0] != r0["seen"][1] or r1["seen"][0] != r1["seen"][1]  # the sampler epoch advanced


def test_trainer_by_backend_name(ray_cluster, run_config):
    def fn():
        import torch.distributed as dist

        trainkit.report({"world": dist.get_world_size()})

    trainer = trainkit.Trainer(fn, backend="torch", scaling_config=ScalingConfig(num_workers=2),
                               run_config=run_config())
    assert isinstance(trainer.backend_config, TorchConfig)
    assert trainer.fit().metrics == {"world": 2}


def ends_as_a_torchrun_script(config):
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 4)
    y = x.sum(dim=1, keepdim=True)
    for _ in range(3):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        dist.barrier()
    dist.destroy_process_group()  # then the model is freed as the function returns


def test_a_training_function_that_destroys_its_process_group_ends(ray_cluster, run_config):
    """The group's last holder was the DDP model's reducer, freed as the function returned with the
    GIL held: the group's destructor then waited for a gloo thread that waited for the GIL (a rank
    hung in about 1 of 3 fits before the worker kept its group until shutdown)."""
    for _ in range(8):
        result = TorchTrainer(ends_as_a_torchrun_script, scaling_config=ScalingConfig(num_workers=2),
                              run_config=run_config()).fit()
        assert result.error is None


def test_local_mode_leaves_model_unwrapped(run_config):
    def fn():
        model = prepare_model(torch.nn.Linear(2, 1))
        trainkit.report({"wrapped": type(model).__name__, "device": str(get_device())})

    result = TorchTrainer(fn, scaling_config=ScalingConfig(num_workers=0), run_config=run_config()).fit()
    assert result.metrics == {"wrapped": "Linear", "device": "cpu"}


@pytest.mark.parametrize("kwargs", [{"init_method": "file"}, {"timeout_s": 0}, {"timeout_s": True}, {"backend": ""}])
def test_torch_config_validation(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        TorchConfig(**kwargs)


def fsdp_on_cpu():
    prepare_model(torch.nn.Linear(2, 1), parallel_strategy="fsdp")


def test_fsdp_on_cpu_fails_with_advice(ray_cluster, run_config):
    with pytest.raises(trainkit.TrainingFailedError, match="needs GPUs"):
        TorchTrainer(fsdp_on_cpu, scaling_config=ScalingConfig(num_workers=2), run_config=run_config()).fit()
    with pytest.raises(ValueError, match="parallel_strategy='zero' is invalid"):
        prepare_model(torch.nn.Linear(2, 1), parallel_strategy="zero")


@requires(gpus=2)  # FSDP and NCCL need CUDA GPUs
def test_fsdp_on_gpus(ray_cluster, run_config):
    def fn():
        import torch.distributed as dist

        model = prepare_model(torch.nn.Linear(8, 8), parallel_strategy="fsdp")
        trainkit.report({"wrapped": type(model).__name__, "backend": dist.get_backend()})

    result = TorchTrainer(fn, scaling_config=ScalingConfig(num_workers=2, use_gpu=True), run_config=run_config()).fit()
    assert result.metrics == {"wrapped": "FullyShardedDataParallel", "backend": "nccl"}


def batchnorm_fn(config):
    """Ray's PyTorch getting-started: every rank saves ``model.pt``; BatchNorm's running stats differ
    per rank (DDP syncs gradients, not buffers)."""
    import os
    import tempfile

    from torch.utils.data import DataLoader, TensorDataset

    rank = trainkit.get_context().get_world_rank()
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1)))
    x = torch.randn(32, 4) + rank  # each rank's shard has its own mean
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for xb, yb in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            optimizer.step()
        with tempfile.TemporaryDirectory() as tmp:
            torch.save(model.module.state_dict(), os.path.join(tmp, "model.pt"))
            trainkit.report({"epoch": epoch, "rank0_mean": model.module[1].running_mean.tolist()},
                            checkpoint=trainkit.Checkpoint.from_directory(tmp))


def test_every_rank_saving_rank_dependent_buffers_keeps_rank_0s_copy(ray_cluster, run_config, caplog):
    from trainkit_torch import load_checkpoint

    with caplog.at_level("WARNING", logger="trainkit"):
        result = TorchTrainer(batchnorm_fn, scaling_config=ScalingConfig(num_workers=2), run_config=run_config()).fit()
    assert result.error is None and result.metrics["epoch"] == 1
    state = load_checkpoint(result.checkpoint, "model.pt")  # the manifest matches the stored bytes
    assert state["1.running_mean"].tolist() == pytest.approx(result.metrics["rank0_mean"])
    warnings = [r.getMessage() for r in caplog.records if "different contents" in r.getMessage()]
    assert len(warnings) == 1 and "'model.pt'" in warnings[0] and "[1]" in warnings[0]


@pytest.mark.parametrize("auto_transfer", [True, False])
@pytest.mark.parametrize("move_to_device", [True, False])
def test_prepare_data_loader_accepts_auto_transfer(auto_transfer, move_to_device):
    """Ray Train's auto_transfer: a side CUDA stream on GPUs; on the CPU the batches are the same."""
    import pickle

    from torch.utils.data import DataLoader, TensorDataset

    dataset = TensorDataset(torch.arange(12.0).reshape(6, 2), torch.arange(6.0))
    loader = prepare_data_loader(DataLoader(dataset, batch_size=4), move_to_device=move_to_device,
                                 auto_transfer=auto_transfer)
    batches = [(x.tolist(), y.tolist(), x.device.type) for x, y in loader]
    assert batches == [(torch.arange(8.0).reshape(4, 2).tolist(), [0.0, 1.0, 2.0, 3.0], "cpu"),
                       ([[8.0, 9.0], [10.0, 11.0]], [4.0, 5.0], "cpu")]
    assert len(loader) == 2 and loader.batch_size == 4
    assert [y.tolist() for _, y in pickle.loads(pickle.dumps(loader))] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_prepare_data_loader_auto_transfer_on_gpu(monkeypatch):
    from torch.utils.data import DataLoader, TensorDataset

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
    dataset = TensorDataset(torch.arange(64.0).reshape(32, 2), torch.arange(32.0))
    for auto_transfer in (True, False):
        loader = prepare_data_loader(DataLoader(dataset, batch_size=8, pin_memory=True), auto_transfer=auto_transfer)
        ys = []
        for x, y in loader:
            assert x.device.type == y.device.type == "cuda"
            ys += (y * 1).tolist()
        assert ys == list(map(float, range(32)))
