"""``XGBoostCheckpointIO``: a Booster in one model file of a trainkit checkpoint."""

from __future__ import annotations

import os
from typing import Any

from trainkit import CheckpointIO


class XGBoostCheckpointIO(CheckpointIO):
    """A ``Booster`` saved with ``save_model`` (the format follows the file name: ``.ubj``, ``.json``).

    Example::

        booster = XGBoostCheckpointIO().load(result.checkpoint)   # verified first
    """

    def __init__(self, filename: str = "model.ubj"):
        self.filename = self.check_filename(filename)

    def save(self, state: Any, directory: str) -> None:
        state.save_model(os.path.join(directory, self.filename))

    def load_from_directory(self, directory: str) -> Any:
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(os.path.join(directory, self.filename))
        return booster
