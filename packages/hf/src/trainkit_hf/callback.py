"""``ReportCallback`` for ``transformers.Trainer``: its logs become trainkit reports, its saves
become durable trainkit checkpoints."""

from __future__ import annotations

import math
import os
from typing import Any

import transformers
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

import trainkit
from trainkit import CheckpointUploadMode


def _numbers(logs: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a Trainer log (it also logs strings and None)."""
    return {k: v for k, v in logs.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


class ReportCallback(transformers.TrainerCallback):
    """Report the Trainer's progress to trainkit, on every rank.

    - Each log (``logging_steps``, evaluations) is reported as metrics, with ``step`` and ``epoch``.
      The end-of-training summary (``train_loss``, ``train_runtime``, ...) is reported with the
      latest value of every metric logged before it, so ``Result.metrics`` has them all.
    - Each save (``save_strategy``) is reported with the checkpoint the Trainer just wrote
      (``output_dir/checkpoint-<step>``: model, optimizer, scheduler, trainer state, every rank's RNG
      state and, under DeepSpeed, every rank's shards) and the metrics logged since the last save.
      Once every rank has written its files, each node's local rank 0 uploads that node's copy,
      so the committed checkpoint holds every rank's files. Resume with
      ``trainer.train(resume_from_checkpoint=path)`` inside ``trainkit_hf.resume_path()``.

    ``checkpoint_upload_mode`` is ``trainkit.report``'s (``ASYNC`` keeps training while it uploads).
    """

    # The Trainer's files sit at the checkpoint's root (no copy into a subdirectory, as Ray Train
    # makes); "." keeps Ray Train's idiom os.path.join(directory, CHECKPOINT_NAME) working.
    CHECKPOINT_NAME = "."

    def __init__(self, checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC):
        self.checkpoint_upload_mode = CheckpointUploadMode(checkpoint_upload_mode)
        self._logged_since_save: dict[str, float] = {}
        self._latest: dict[str, float] = {}
        self._saved_step = -1

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        metrics = _numbers(logs or {})
        if "train_runtime" in metrics:  # the summary the Trainer logs once training ends
            metrics = {**self._latest, **metrics}
        self._logged_since_save.update(metrics)
        self._latest.update(metrics)
        trainkit.report({**metrics, "step": state.global_step, "epoch": state.epoch or 0.0})

    def on_save(self, args, state, control, **kwargs) -> None:
        if state.global_step == self._saved_step:
            return  # Transformers before 4.51 may call on_save twice for the last step's checkpoint
        self._saved_step = state.global_step
        path = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        _barrier()  # every rank has written its files into the checkpoint directory
        checkpoint = None
        if trainkit.get_context().get_local_rank() == 0:
            if not os.path.isdir(path):
                raise FileNotFoundError(f"the Trainer saved no checkpoint at {path}: is output_dir on each node's "
                                        "local disk or shared, and save_only_model unset?")
            checkpoint = trainkit.Checkpoint.from_directory(path)
        metrics = {**self._logged_since_save, "step": state.global_step, "epoch": state.epoch or 0.0}
        self._logged_since_save = {}
        trainkit.report(metrics, checkpoint=checkpoint, checkpoint_upload_mode=self.checkpoint_upload_mode)
