"""Lightning's own Trainer on 2 real trainkit workers (DDP over gloo), under both import names."""

import importlib
import json
import os
import signal
import sys

import pytest

import trainkit
from trainkit import FailureConfig, ScalingConfig
from trainkit.testing import requires, subprocesses
from trainkit.testing.steps import wait_until_logged
from trainkit_torch import TorchTrainer

NAMESPACES = ["lightning.pytorch", "pytorch_lightning"]


def train_fn(config):
    """A linear classifier on generated data; the Lightning import name comes from the config."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import trainkit_lightning as tkl

    pl = importlib.import_module(config["namespace"])

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)
            self.seen = 0

        def training_step(self, batch, batch_idx):
            x, y = batch
            self.seen += len(x)
            loss = torch.nn.functional.cross_entropy(self.layer(x), y)
            self.log("loss", loss, on_epoch=True, on_step=False, sync_dist=True)
            return loss

        def on_train_epoch_start(self):
            kill = config.get("kill_at_epoch")
            if kill is not None and self.current_epoch == kill and trainkit.get_context().get_attempt() == 0 \
                    and self.global_rank == 1:
                wait_until_logged(kill)  # the epochs before this one committed: the kill loses none of them
                os.kill(os.getpid(), signal.SIGKILL)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if batch_idx + 1 < self.trainer.num_training_batches:
                return  # ReportCallback reports at on_train_epoch_end, before this module's own
            weights = torch.cat([p.detach().flatten() for p in self.parameters()])
            gathered = self.all_gather(weights)
            self.log("replicas_equal", float(torch.allclose(gathered[0], gathered[1])), rank_zero_only=True)
            self.log("rows_seen", float(self.seen))
            self.seen = 0

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    data = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8, shuffle=True)
    trainer = pl.Trainer(max_epochs=config["epochs"], accelerator="cpu", devices="auto",
                         strategy=tkl.DDPStrategy(), plugins=[tkl.LightningEnvironment()],
                         callbacks=[tkl.ReportCallback()], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    assert isinstance(trainer.strategy, pl.strategies.DDPStrategy)
    tkl.prepare_trainer(trainer)
    with tkl.resume_path() as ckpt_path:
        trainer.fit(Model(), train_dataloaders=data, ckpt_path=ckpt_path)


def fit(run_config, **config):
    return TorchTrainer(train_fn, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                        run_config=run_config(failure_config=FailureConfig(max_failures=1))).fit()


def logged(result):
    return [json.loads(line) for line in open(os.path.join(result.path, "metrics.jsonl"))]


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_ddp_trains_on_2_workers_and_reports_each_epoch(ray_cluster, run_config, namespace):
    result = fit(run_config, namespace=namespace, epochs=2)
    lines = logged(result)
    assert [line["metrics"]["epoch"] for line in lines] == [0, 1]
    assert [line["metrics"]["step"] for line in lines] == [4, 8]  # 64 rows / 2 ranks / batches of 8
    assert all(line["metrics"]["replicas_equal"] == 1.0 for line in lines)  # DDP synchronised the replicas
    assert all(line["metrics"]["rows_seen"] == 32.0 for line in lines)  # each rank saw its half
    assert lines[0]["metrics"]["loss"] > lines[1]["metrics"]["loss"]
    assert sorted(os.listdir(result.checkpoint.path)) == [".manifest.json", "checkpoint.ckpt"]


def test_resume_after_sigkill_continues_from_the_next_epoch(ray_cluster, run_config):
    result = fit(run_config, namespace="lightning.pytorch", epochs=4, kill_at_epoch=2)
    lines = logged(result)
    # rank 1 dies once epochs 0 and 1 committed: the restart continues with epoch 2
    assert [(line["metrics"]["epoch"], line["attempt"]) for line in lines] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert [line["metrics"]["step"] for line in lines] == [4, 8, 12, 16]  # loop and optimizer state restored


def test_prepare_trainer_says_what_to_change(ray_cluster, run_config):
    def bad_fn():
        import lightning.pytorch as pl

        import trainkit_lightning as tkl

        messages = {}
        for name, kwargs in {"auto": {"strategy": "auto"},
                             "fsdp": {"strategy": tkl.FSDPStrategy(), "plugins": [tkl.LightningEnvironment()]}}.items():
            try:
                tkl.prepare_trainer(pl.Trainer(accelerator="cpu", devices=1, logger=False, **kwargs))
            except ValueError as exc:
                messages[name] = str(exc)
        trainkit.report(messages)

    messages = TorchTrainer(bad_fn, scaling_config=ScalingConfig(num_workers=2), run_config=run_config()).fit().metrics
    assert "strategy=trainkit_lightning.DDPStrategy()" in messages["auto"]
    assert "plugins=[trainkit_lightning.LightningEnvironment()]" in messages["auto"]
    assert "FSDPStrategy needs GPUs" in messages["fsdp"] and "use_gpu=True" in messages["fsdp"]


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_classes_follow_the_import_name_in_use(namespace):
    code = (f"import {namespace} as pl, sys, trainkit_lightning as tkl\n"
            "other = {'lightning.pytorch': 'pytorch_lightning', 'pytorch_lightning': 'lightning.pytorch'}"
            f"['{namespace}']\n"
            "assert other not in sys.modules\n"
            "for name in ('DDPStrategy', 'FSDPStrategy'):\n"
            "    s = getattr(tkl, name)()\n"
            "    assert isinstance(s, getattr(pl.strategies, name)) and isinstance(s, getattr(tkl, name))\n"
            "built = tkl.classes_for(tkl._build.current_namespace()).DeepSpeedStrategy  # needs deepspeed to construct\n"
            "assert issubclass(built, pl.strategies.DeepSpeedStrategy) and issubclass(built, tkl.DeepSpeedStrategy)\n"
            "assert isinstance(tkl.LightningEnvironment(), pl.plugins.environments.ClusterEnvironment)\n"
            "assert isinstance(tkl.ReportCallback(every_n_epochs=2), pl.Callback)\n"
            "assert not isinstance(tkl.ReportCallback(), pl.callbacks.Checkpoint)  # enable_checkpointing=False works\n"
            "explicit = tkl.classes_for(other).DDPStrategy()\n"
            "assert isinstance(explicit, tkl.DDPStrategy) and not isinstance(explicit, pl.strategies.DDPStrategy)\n")
    subprocesses.run([sys.executable, "-c", code], check=True, timeout=120)


def test_report_callback_refuses_bad_arguments():
    import trainkit_lightning as tkl

    with pytest.raises(ValueError, match="every_n_epochs=0"):
        tkl.ReportCallback(every_n_epochs=0)


@requires(gpus=2)
@pytest.mark.parametrize("strategy", ["FSDPStrategy", "DeepSpeedStrategy"])
def test_sharded_strategies_on_gpus(ray_cluster, run_config, strategy):
    """Torch's FSDP and DeepSpeed have no CPU path; this runs where a GPU machine is lent."""
    if strategy == "DeepSpeedStrategy":
        pytest.importorskip("deepspeed", reason="DeepSpeedStrategy needs deepspeed installed")

    def sharded_fn():
        import lightning.pytorch as pl
        from lightning.pytorch.demos.boring_classes import BoringModel

        import trainkit_lightning as tkl

        trainer = pl.Trainer(max_epochs=2, accelerator="gpu", devices="auto", logger=False, limit_train_batches=4,
                             limit_val_batches=2, strategy=getattr(tkl, strategy)(),
                             plugins=[tkl.LightningEnvironment()], callbacks=[tkl.ReportCallback()],
                             enable_checkpointing=False)
        with tkl.resume_path() as ckpt_path:
            tkl.prepare_trainer(trainer).fit(BoringModel(), ckpt_path=ckpt_path)

    result = TorchTrainer(sharded_fn, scaling_config=ScalingConfig(num_workers=2, use_gpu=True),
                          run_config=run_config()).fit()
    assert result.metrics["epoch"] == 1 and result.checkpoint is not None


def getting_started_fn():
    """Ray Train's Lightning getting-started: Lightning's (rich) progress bar on, Lightning's own
    checkpointing off, ReportCallback reporting every epoch. The progress bar is listed first, so on
    rank 0 it reads (and syncs) the epoch's metrics before the report does."""
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import trainkit_lightning as tkl

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.layer(x), y)
            self.log("loss", loss, on_epoch=True, prog_bar=True, sync_dist=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
    trainer = pl.Trainer(max_epochs=2, devices="auto", accelerator="auto", strategy=tkl.DDPStrategy(),
                         plugins=[tkl.LightningEnvironment()], callbacks=[pl.callbacks.RichProgressBar(), tkl.ReportCallback()],
                         enable_checkpointing=False, logger=False)
    assert type(trainer.progress_bar_callback).__name__ == "RichProgressBar"
    trainer = tkl.prepare_trainer(trainer)
    trainer.fit(Model(), train_dataloaders=data)


def test_getting_started_with_progress_bar_and_checkpointing_disabled(ray_cluster, run_config):
    result = TorchTrainer(getting_started_fn, scaling_config=ScalingConfig(num_workers=2),
                          run_config=run_config(failure_config=FailureConfig(worker_timeout_s=30))).fit()
    assert [line["metrics"]["epoch"] for line in logged(result)] == [0, 1]
    assert "loss" in result.metrics and sorted(os.listdir(result.checkpoint.path)) == [".manifest.json",
                                                                                       "checkpoint.ckpt"]
