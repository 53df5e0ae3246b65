"""``LightGBMCheckpointIO``: a Booster as the text model file of a trainkit checkpoint."""

from __future__ import annotations

import os
from typing import Any

from trainkit import CheckpointIO


class LightGBMCheckpointIO(CheckpointIO):
    """A ``lightgbm.Booster`` saved with ``save_model`` as text.

    Example::

        booster = LightGBMCheckpointIO().load(result.checkpoint)   # verified first
    """

    def __init__(self, filename: str = "model.txt"):
        self.filename = self.check_filename(filename)

    def save(self, state: Any, directory: str) -> None:
        state.save_model(os.path.join(directory, self.filename))

    def load_from_directory(self, directory: str) -> Any:
        import lightgbm

        return lightgbm.Booster(model_file=os.path.join(directory, self.filename))
