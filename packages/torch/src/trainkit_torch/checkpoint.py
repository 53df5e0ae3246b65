"""Torch state in trainkit checkpoints: saved with ``torch.save``, loaded verified and tensors-only."""

from __future__ import annotations

import os
from typing import Any

from trainkit import Checkpoint, CheckpointIO


class TorchCheckpointIO(CheckpointIO):
    """One ``torch.save`` file per checkpoint, loaded with ``weights_only=True`` and never a fallback.

    A pickle that needs more than tensors and plain containers raises ``pickle.UnpicklingError``;
    load such a file yourself only if you trust where it came from.

    Example::

        io = TorchCheckpointIO("model.pt")
        with tempfile.TemporaryDirectory() as tmp:
            io.save({"model": model.state_dict(), "epoch": epoch}, tmp)
            trainkit.report(metrics, checkpoint=trainkit.Checkpoint.from_directory(tmp))
    """

    def __init__(self, filename: str = "model.pt", map_location: Any = "cpu"):
        self.filename, self.map_location = self.check_filename(filename), map_location

    def save(self, state: Any, directory: str) -> None:
        import torch

        torch.save(state, os.path.join(directory, self.filename))

    def load_from_directory(self, directory: str) -> Any:
        import torch

        return torch.load(os.path.join(directory, self.filename), map_location=self.map_location, weights_only=True)


def load_checkpoint(checkpoint: Checkpoint, filename: str = "model.pt", map_location: Any = "cpu") -> Any:
    """``TorchCheckpointIO(filename, map_location).load(checkpoint)``: verify, then load tensors only.

    Example::

        state = trainkit_torch.load_checkpoint(trainkit.get_checkpoint(), "model.pt")
        model.load_state_dict(state["model"])
    """
    return TorchCheckpointIO(filename, map_location).load(checkpoint)
