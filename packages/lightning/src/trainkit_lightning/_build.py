"""The Lightning classes, built once for each of Lightning's two import names.

``lightning.pytorch`` and ``pytorch_lightning`` are separate copies of the same code: a strategy built
on one is refused by the other's ``Trainer`` (Ray Train's "invalid strategy name"). So every class
here is built for the namespace in use, on first use.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from types import SimpleNamespace
from typing import Any

import trainkit
from trainkit.framework import resume_file
from trainkit.validation import check_int

from trainkit_lightning import _public

CHECKPOINT_NAME = _public.ReportCallback.CHECKPOINT_NAME
NAMESPACES = ("lightning.pytorch", "pytorch_lightning")
FABRIC = {"lightning.pytorch": "lightning.fabric", "pytorch_lightning": "lightning_fabric"}  # their loggers


def current_namespace() -> str:
    """The import name the training code uses: the one already imported, else ``lightning.pytorch``
    when installed, else ``pytorch_lightning``."""
    imported = [name for name in NAMESPACES if name in sys.modules]
    if len(imported) == 1:
        return imported[0]
    return "lightning.pytorch" if importlib.util.find_spec("lightning") else "pytorch_lightning"


@functools.cache
def classes_for(namespace: str) -> SimpleNamespace:
    """trainkit's Lightning classes built on ``namespace`` ("lightning.pytorch" or "pytorch_lightning")."""
    if namespace not in NAMESPACES:
        raise ValueError(f"namespace={namespace!r} is invalid: expected one of {NAMESPACES}")
    pl = importlib.import_module(namespace)
    if os.environ.get("TRAINKIT_VERBOSE") != "2":  # Lightning's start-up notes and tips: shown at verbose=2
        for package in (namespace, FABRIC[namespace]):
            logging.getLogger(package).setLevel(logging.WARNING)
    strategies = importlib.import_module(f"{namespace}.strategies")
    environments = importlib.import_module(f"{namespace}.plugins.environments")

    def world() -> Any:
        return trainkit.get_context()

    class LightningEnvironment(_public.LightningEnvironment, environments.LightningEnvironment):
        """Ranks and world size from ``trainkit.get_context()``; trainkit started the processes."""

        @property
        def creates_processes_externally(self) -> bool:
            return True

        def world_size(self) -> int:
            return world().get_world_size()

        def global_rank(self) -> int:
            return world().get_world_rank()

        def local_rank(self) -> int:
            return world().get_local_rank()

        def node_rank(self) -> int:
            return world().get_node_rank()

        def set_world_size(self, size: int) -> None:
            pass  # trainkit's, not Lightning's to choose

        def set_global_rank(self, rank: int) -> None:
            pass

        def teardown(self) -> None:
            pass  # the process group and its env belong to trainkit

    def on_trainkit(base: type, public: type) -> type:
        """``base`` on trainkit's device, ranks and (already initialized) process group."""

        class Strategy(public, base):
            @property
            def root_device(self) -> Any:
                from trainkit_torch import get_device

                return get_device()

            @property
            def distributed_sampler_kwargs(self) -> dict[str, Any]:
                return {"num_replicas": world().get_world_size(), "rank": world().get_world_rank()}

        Strategy.__name__ = Strategy.__qualname__ = public.__name__
        return Strategy

    # A plain Callback, as Ray's: Lightning refuses Checkpoint callbacks with enable_checkpointing=False.
    class ReportCallback(_public.ReportCallback, pl.callbacks.Callback):
        def __init__(self, every_n_epochs: int = 1,
                     checkpoint_upload_mode: Any = trainkit.CheckpointUploadMode.SYNC) -> None:
            check_int("every_n_epochs", every_n_epochs, 1)
            self.every_n_epochs = every_n_epochs
            self.checkpoint_upload_mode = trainkit.CheckpointUploadMode(checkpoint_upload_mode)

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            if (trainer.current_epoch + 1) % self.every_n_epochs == 0 or trainer.current_epoch + 1 == trainer.max_epochs:
                report_epoch(trainer, self.checkpoint_upload_mode)

    for public in (ReportCallback, LightningEnvironment):
        public.__qualname__ = public.__name__
    return SimpleNamespace(
        namespace=namespace, LightningEnvironment=LightningEnvironment, ReportCallback=ReportCallback,
        DDPStrategy=on_trainkit(strategies.DDPStrategy, _public.DDPStrategy),
        FSDPStrategy=on_trainkit(strategies.FSDPStrategy, _public.FSDPStrategy),
        DeepSpeedStrategy=on_trainkit(strategies.DeepSpeedStrategy, _public.DeepSpeedStrategy),
    )


def metrics_of(trainer: Any) -> dict[str, Any]:
    """``trainer.callback_metrics`` as plain numbers, plus ``epoch`` and ``step``."""
    metrics = {key: value.item() if hasattr(value, "item") else value for key, value in trainer.callback_metrics.items()}
    return {**metrics, "epoch": trainer.current_epoch, "step": trainer.global_step}


def report_epoch(trainer: Any, upload_mode: trainkit.CheckpointUploadMode) -> None:
    """Every rank saves (the strategy decides which ranks write which files: rank 0 for DDP, every rank
    its shards for DeepSpeed) and reports the same checkpoint directory.

    Metrics are read first: reading them syncs ``sync_dist`` values (an all-reduce), which rank 0's
    progress bar may already have done; saving has a barrier. Read in the other order, the ranks'
    collectives would pair up wrongly and hang."""
    metrics = metrics_of(trainer)
    directory = tempfile.mkdtemp(prefix="trainkit-lightning-")
    try:
        trainer.save_checkpoint(os.path.join(directory, CHECKPOINT_NAME), weights_only=False)
        checkpoint = trainkit.Checkpoint.from_directory(directory) if os.listdir(directory) else None
        trainkit.report(metrics, checkpoint=checkpoint, checkpoint_upload_mode=upload_mode)
    finally:
        if upload_mode is not trainkit.CheckpointUploadMode.ASYNC:  # ASYNC removes it once uploaded
            shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def resume_path(checkpoint: trainkit.Checkpoint | None = None) -> Any:
    """The Lightning checkpoint in ``checkpoint`` (default: ``trainkit.get_checkpoint()``), verified
    against its manifest, for ``trainer.fit(ckpt_path=...)``; None on a fresh start."""
    with resume_file(CHECKPOINT_NAME, "trainkit_lightning.ReportCallback", checkpoint) as path:
        yield path
