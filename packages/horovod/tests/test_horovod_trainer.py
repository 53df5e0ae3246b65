"""HorovodTrainer on 2 real Ray workers: Horovod's Gloo controller and operations, no MPI."""

import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

import trainkit
from trainkit import ScalingConfig

pytest.importorskip("horovod", reason="Horovod is built, not pip-installed: nox -t horovod runs these")
from trainkit_horovod import HorovodConfig, HorovodTrainer  # noqa: E402
from trainkit.testing import subprocesses

ROOT = Path(__file__).parents[3]


class Collect(trainkit.UserCallback):
    def __init__(self):
        self.reports = []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append(metrics)


def train_fn(config):
    import horovod.torch as hvd

    hvd.init()
    ctx = trainkit.get_context()
    rank = hvd.rank()
    rank_sum = hvd.allreduce(torch.tensor([float(rank)]), op=hvd.Sum, name="ranks").item()
    torch.manual_seed(rank)  # different initial weights and data on every rank
    model = torch.nn.Linear(4, 1)
    initial = torch.cat([p.detach().flatten() for p in model.parameters()])
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                         named_parameters=model.named_parameters())
    x = torch.randn(16, 4)
    y = x.sum(dim=1, keepdim=True) * (rank + 1)
    for _ in range(5):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    metrics = {"rank": rank, "size": hvd.size(), "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
               "cross_rank": hvd.cross_rank(), "cross_size": hvd.cross_size(), "trainkit_rank": ctx.get_world_rank(),
               "rank_sum": rank_sum, "initial": initial.tolist(), "params": params.tolist(), "data": x[0].tolist(),
               "gloo": hvd.gloo_enabled() and hvd.gloo_built(), "mpi": hvd.mpi_enabled()}
    with tempfile.TemporaryDirectory() as directory:
        torch.save(model.state_dict(), os.path.join(directory, "model.pt"))
        trainkit.report(metrics, checkpoint=trainkit.Checkpoint.from_directory(directory) if rank == 0 else None)


def test_all_reduce_and_identical_weights_across_ranks(ray_cluster, run_config):
    collect = Collect()
    result = HorovodTrainer(train_fn, scaling_config=ScalingConfig(num_workers=2),
                            run_config=run_config(callbacks=[collect])).fit()
    r0, r1 = collect.reports[-1]
    assert [r0["rank"], r1["rank"]] == [r0["trainkit_rank"], r1["trainkit_rank"]] == [0, 1]
    assert r0["size"] == r1["size"] == 2 and r0["local_size"] == 2 and [r0["local_rank"], r1["local_rank"]] == [0, 1]
    assert r0["cross_rank"] == r1["cross_rank"] == 0 and r0["cross_size"] == 1
    assert r0["gloo"] and not r0["mpi"]
    assert r0["rank_sum"] == r1["rank_sum"] == 1.0  # a real all-reduce across the two workers
    assert r0["initial"] != r1["initial"] and r0["data"] != r1["data"]  # different starts, different shards
    assert r0["params"] == r1["params"]  # broadcast + averaged gradients: identical replicas
    assert r0["params"] != r0["initial"]  # and they trained
    assert result.metrics["rank"] == 0
    with result.checkpoint.as_directory() as directory:
        saved = torch.load(os.path.join(directory, "model.pt"))
    assert torch.cat([saved["weight"].flatten(), saved["bias"]]).tolist() == r0["params"]


def resumable_fn(config):
    """Counts steps in its checkpoint; the first attempt's rank 1 fails at step ``fail_at`` when asked."""
    import horovod.torch as hvd

    hvd.init()
    checkpoint, step = trainkit.get_checkpoint(), 0
    if checkpoint:
        step = int(Path(checkpoint.path, "step.txt").read_text())
    alive = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, name="alive").item()
    while step < config["steps"]:
        step += 1
        if config.get("fail_at") == step and checkpoint is None:
            trainkit.collective.barrier()  # the last step's report() returned on every rank
            if hvd.rank() == 1:
                raise RuntimeError("injected failure")
        total = hvd.allreduce(torch.tensor([float(step)]), op=hvd.Sum, name=f"step{step}").item()
        metrics = {"step": step, "total": total, "alive": alive, "resumed": checkpoint is not None}
        with tempfile.TemporaryDirectory() as directory:
            Path(directory, "step.txt").write_text(str(step))
            saved = trainkit.Checkpoint.from_directory(directory) if hvd.rank() == 0 else None  # rank 0 saves
            trainkit.report(metrics, checkpoint=saved)


def test_restarted_attempt_initializes_horovod_again_and_resumes(ray_cluster, run_config):
    collect = Collect()
    rc = run_config(callbacks=[collect], failure_config=trainkit.FailureConfig(max_failures=1))
    result = HorovodTrainer(resumable_fn, train_loop_config={"steps": 3, "fail_at": 2},
                            scaling_config=ScalingConfig(num_workers=2), run_config=rc).fit()
    assert result.metrics["step"] == 3 and result.metrics["total"] == 6.0
    steps = [(r[0]["step"], r[0]["resumed"]) for r in collect.reports]
    assert steps == [(1, False), (2, True), (3, True)]  # attempt 2 resumed after step 1 and all-reduced again
    assert all(r[0]["alive"] == r[1]["alive"] == 2.0 for r in collect.reports)


def test_second_fit_resumes_from_the_last_checkpoint(ray_cluster, run_config):
    rc = run_config()
    first = HorovodTrainer(resumable_fn, train_loop_config={"steps": 2},
                           scaling_config=ScalingConfig(num_workers=2), run_config=rc).fit()
    assert first.metrics["step"] == 2 and not first.metrics["resumed"]
    second = HorovodTrainer(resumable_fn, train_loop_config={"steps": 4}, scaling_config=ScalingConfig(num_workers=2),
                            run_config=run_config(name=rc.name, storage_path=rc.storage_path)).fit()
    assert second.metrics == {"step": 4, "total": 8.0, "alive": 2.0, "resumed": True}


def test_trainer_by_backend_name(ray_cluster, run_config):
    def fn():
        import horovod.torch as hvd

        hvd.init()
        trainkit.report({"size": hvd.size(), "sum": hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item()})

    result = trainkit.Trainer(fn, backend="horovod", scaling_config=ScalingConfig(num_workers=2),
                              run_config=run_config()).fit()
    assert result.metrics == {"size": 2, "sum": 2.0}


def test_local_mode_is_a_single_horovod_process(run_config):
    def fn():
        import horovod.torch as hvd

        hvd.init()
        trainkit.report({"size": hvd.size(), "rank": hvd.rank()})
        hvd.shutdown()

    result = HorovodTrainer(fn, scaling_config=ScalingConfig(num_workers=0), run_config=run_config()).fit()
    assert result.metrics == {"size": 1, "rank": 0}


@pytest.mark.parametrize("kwargs, field", [({"nics": "eth0"}, "nics"), ({"nics": set()}, "nics"),
                                            ({"timeout_s": 0}, "timeout_s"), ({"verbose": -1}, "verbose"),
                                            ({"verbose": 0.5}, "verbose")])
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}="):
        HorovodConfig(**kwargs)


def test_wrong_config_type_is_refused():
    with pytest.raises(TypeError, match="horovod_config must be a HorovodConfig"):
        HorovodTrainer(lambda: None, horovod_config={"timeout_s": 1})


def test_missing_horovod_says_how_to_install_it():
    code = ("import sys; sys.modules['horovod'] = None\n"  # as if Horovod were not installed
            "from trainkit_horovod import HorovodTrainer\n"
            "HorovodTrainer(lambda: None)")
    done = subprocesses.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "Horovod is not installed" in done.stderr and "python -m trainkit_horovod.build" in done.stderr


def test_example_trains_on_two_workers(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "TRAINKIT_VERBOSE": "0"}
    done = subprocesses.run([sys.executable, str(ROOT / "examples" / "horovod_digits.py")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    accuracy = float(done.stdout.split("held-out accuracy:")[1].split()[0])
    assert accuracy > 0.9, done.stdout
