"""One GPU check, a small real training run through trainkit on GPU workers:
``python bench/gpu_check.py {nccl_ddp,fsdp,lightning_fsdp,deepspeed_zero3,jax}``. The torch checks
run ``TorchTrainer`` with ``use_gpu=True``; ``jax`` runs ``JaxTrainer`` with ``use_gpu=True`` (jax
sees a GPU in the worker, a jitted MLP trains there). 2 workers where the machine has 2 GPUs, else 1
(NCCL refuses two ranks on one GPU). Exits 0 when the run trained on the GPU with the expected
strategy. bench/gpu_check.sh installs what these need and runs each in turn."""

import sys
import tempfile

import torch

import trainkit
from trainkit.testing import gpu_count
from trainkit_torch import TorchTrainer, get_device, prepare_model


def _train(model, step_fn, device, steps: int = 20) -> dict:
    """``steps`` optimizer steps on a fixed regression batch; the first and last loss."""
    data = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16, generator=data).to(device)
    y = x.sum(dim=1, keepdim=True)
    losses = [step_fn(torch.nn.functional.mse_loss(model(x), y)) for _ in range(steps)]
    return {"first_loss": losses[0], "last_loss": losses[-1]}


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def _torch_run(strategy: str):
    def fn():
        import torch.distributed as dist

        model = prepare_model(_mlp(), parallel_strategy=strategy)
        if dist.get_world_size() == 1:  # prepare_model leaves a single worker's model unwrapped
            from torch.distributed.fsdp import FullyShardedDataParallel
            from torch.nn.parallel import DistributedDataParallel

            device = get_device()
            model = (DistributedDataParallel(model, device_ids=[device]) if strategy == "ddp"
                     else FullyShardedDataParallel(model, device_id=device))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

        def step(loss):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss.item()

        trainkit.report({"wrapped": type(model).__name__, "backend": dist.get_backend(),
                         "device": str(next(model.parameters()).device), **_train(model, step, get_device())})
    return fn


def _deepspeed_zero3():
    import deepspeed
    import torch.distributed as dist

    engine, *_ = deepspeed.initialize(model=_mlp(), config={
        "train_micro_batch_size_per_gpu": 64, "zero_optimization": {"stage": 3},
        "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}}})  # no op build

    def step(loss):
        engine.backward(loss)
        engine.step()
        return loss.item()

    trainkit.report({"wrapped": f"zero{engine.zero_optimization_stage()}", "backend": dist.get_backend(),
                     "device": str(engine.device), **_train(engine, step, engine.device)})


def _lightning_fsdp():
    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel

    import trainkit_lightning as tkl

    trainer = pl.Trainer(max_epochs=2, accelerator="gpu", devices="auto", logger=False, limit_train_batches=4,
                         limit_val_batches=2, strategy=tkl.FSDPStrategy(), plugins=[tkl.LightningEnvironment()],
                         callbacks=[tkl.ReportCallback()], enable_progress_bar=False)
    with tkl.resume_path() as ckpt_path:
        tkl.prepare_trainer(trainer).fit(BoringModel(), ckpt_path=ckpt_path)


def _jax():
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    if jax.default_backend() != "gpu" or device.platform != "gpu":
        raise RuntimeError(f"jax runs on {jax.default_backend()}, not a GPU: {jax.devices()}")
    x = jax.random.normal(jax.random.PRNGKey(0), (64, 16))
    y = x.sum(axis=1, keepdims=True)
    k1, k2 = jax.random.split(jax.random.PRNGKey(1))
    params = {"w1": jax.random.normal(k1, (16, 64)) * 0.25, "b1": jnp.zeros(64),
              "w2": jax.random.normal(k2, (64, 1)) * 0.125, "b2": jnp.zeros(1)}

    def loss_fn(p):
        return jnp.mean((jnp.maximum(x @ p["w1"] + p["b1"], 0) @ p["w2"] + p["b2"] - y) ** 2)

    @jax.jit
    def step(p):
        loss, grads = jax.value_and_grad(loss_fn)(p)
        return jax.tree_util.tree_map(lambda a, g: a - 0.01 * g, p, grads), loss

    losses = []
    for _ in range(20):
        params, loss = step(params)
        losses.append(float(loss))
    leaf = jax.tree_util.tree_leaves(params)[0]
    trainkit.report({"wrapped": "jax.jit", "backend": jax.default_backend(), "device": str(device),
                     "device_kind": device.device_kind, "on": str(next(iter(leaf.devices()))),
                     "jax_platforms": jax.config.jax_platforms, "processes": jax.process_count(),
                     "first_loss": losses[0], "last_loss": losses[-1]})


CHECKS = {
    "nccl_ddp": (_torch_run("ddp"), lambda m: m["wrapped"] == "DistributedDataParallel"),
    "fsdp": (_torch_run("fsdp"), lambda m: m["wrapped"] == "FullyShardedDataParallel"),
    "deepspeed_zero3": (_deepspeed_zero3, lambda m: m["wrapped"] == "zero3"),
    "lightning_fsdp": (_lightning_fsdp, lambda m: m.get("epoch") == 1),
    "jax": (_jax, lambda m: m["backend"] == "gpu" and m["processes"] == min(2, gpu_count())),
}


def main(name: str) -> None:
    fn, expected = CHECKS[name]
    if name == "jax":
        from trainkit_jax import JaxTrainer as trainer_cls
    else:
        trainer_cls = TorchTrainer
    with tempfile.TemporaryDirectory() as storage:
        result = trainer_cls(fn, scaling_config=trainkit.ScalingConfig(num_workers=min(2, gpu_count()), use_gpu=True),
                             run_config=trainkit.RunConfig(name=name, storage_path=storage, verbose=0)).fit()
        metrics = result.metrics or {}
        trained = "last_loss" not in metrics or metrics["last_loss"] < metrics["first_loss"]
        on_gpu = name == "jax" or (metrics.get("device", "cuda").startswith("cuda")
                                   and metrics.get("backend", "nccl") == "nccl")
        if not (expected(metrics) and trained and on_gpu and (name != "lightning_fsdp" or result.checkpoint)):
            sys.exit(f"unexpected result: {metrics}")
        shown = ("wrapped", "backend", "device", "device_kind", "on", "jax_platforms", "first_loss", "last_loss",
                 "epoch")
        print({k: metrics[k] for k in shown if k in metrics})


if __name__ == "__main__":
    main(sys.argv[1])
