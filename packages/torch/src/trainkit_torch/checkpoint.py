"""Loading torch files from trainkit checkpoints, safely."""

from __future__ import annotations

import os
from typing import Any

from trainkit import Checkpoint
from trainkit._internal.storage import MANIFEST, read_manifest


def load_checkpoint(checkpoint: Checkpoint, filename: str = "model.pt", map_location: Any = "cpu") -> Any:
    """``torch.load`` a file of ``checkpoint`` with ``weights_only=True`` and never a fallback.

    A committed checkpoint (one with a ``.manifest.json``) is verified against its sha256s first.
    A pickle that needs more than tensors and plain containers raises ``pickle.UnpicklingError``;
    load such a file yourself only if you trust where it came from.

    Example::

        state = trainkit_torch.load_checkpoint(trainkit.get_checkpoint(), "model.pt")
        model.load_state_dict(state["model"])
    """
    import torch

    if read_manifest(checkpoint.filesystem, checkpoint.path) is not None:
        checkpoint.verify()
    elif filename == MANIFEST:
        raise ValueError(f"{MANIFEST} is trainkit's own file")
    with checkpoint.as_directory() as path:
        return torch.load(os.path.join(path, filename), map_location=map_location, weights_only=True)
