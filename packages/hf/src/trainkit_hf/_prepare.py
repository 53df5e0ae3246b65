"""``prepare_trainer`` and ``resume_path``: the checks and the resume idiom around a
``transformers.Trainer`` on trainkit workers."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterator

import trainkit
from trainkit.framework import resume_file

logger = logging.getLogger("trainkit_hf")
STATE_FILE = "trainer_state.json"  # every Trainer checkpoint has one


def prepare_trainer(trainer: Any) -> Any:
    """Check that ``trainer`` (a ``transformers.Trainer``) runs distributed across exactly trainkit's
    workers, and raise saying what to change when it does not. Returns ``trainer``.

    The usual causes: ``TrainingArguments`` built before trainkit started the worker (e.g. in the
    driver, then passed in), or a launcher of its own (``torchrun``/``accelerate launch``) inside
    the training function.
    """
    context = trainkit.get_context()
    args = trainer.args
    if getattr(args, "deepspeed", None) and not _has_gpu():
        raise RuntimeError(
            "TrainingArguments(deepspeed=...) needs GPUs: Accelerate, which runs the Trainer's DeepSpeed, has no "
            "distributed backend for DeepSpeed on CPUs (each worker would train alone). Use "
            "ScalingConfig(use_gpu=True), or call deepspeed.initialize in the training function yourself, which "
            "runs on CPUs too (see docs/huggingface.md)")
    if args.world_size != context.get_world_size() or args.process_index != context.get_world_rank():
        raise RuntimeError(
            f"the Trainer sees rank {args.process_index} of {args.world_size} but trainkit started rank "
            f"{context.get_world_rank()} of {context.get_world_size()}: build TrainingArguments inside the training "
            "function (trainkit sets MASTER_ADDR, RANK, WORLD_SIZE and LOCAL_RANK and forms the process group)")
    if args.world_size > 1 and getattr(args, "average_tokens_across_devices", False):
        logger.warning("average_tokens_across_devices=True: the Trainer logs its loss multiplied by the number of "
                       "workers (%d); set it to False for the per-sample loss", args.world_size)
    from trainkit_hf.callback import ReportCallback

    if not any(isinstance(c, ReportCallback) for c in trainer.callback_handler.callbacks):
        logger.warning("the Trainer has no trainkit_hf.ReportCallback: its metrics and checkpoints won't reach trainkit")
    return trainer


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


@contextlib.contextmanager
def resume_path(checkpoint: trainkit.Checkpoint | None = None) -> Iterator[str | None]:
    """A local directory holding the Trainer checkpoint in ``checkpoint`` (default:
    ``trainkit.get_checkpoint()``), verified against its manifest, for
    ``trainer.train(resume_from_checkpoint=...)``; None on a fresh start."""
    with resume_file(STATE_FILE, "trainkit_hf.ReportCallback", checkpoint) as state_file:
        yield state_file and os.path.dirname(state_file)
