"""``XGBoostCheckpointIO``: a Booster in one model file of a trainkit checkpoint."""

from __future__ import annotations

from typing import Any

from trainkit.framework import ModelFileCheckpointIO


class XGBoostCheckpointIO(ModelFileCheckpointIO):
    """A ``Booster`` saved with ``save_model`` (``model.ubj`` unless ``filename``; the format follows
    the file name: ``.ubj``, ``.json``).

    Example::

        booster = XGBoostCheckpointIO().load(result.checkpoint)   # verified first
    """

    default_filename = "model.ubj"

    def load_model(self, path: str) -> Any:
        import xgboost

        booster = xgboost.Booster()
        booster.load_model(path)
        return booster
