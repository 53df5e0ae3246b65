"""``LightGBMCheckpointIO``: a Booster as the text model file of a trainkit checkpoint."""

from __future__ import annotations

from typing import Any

from trainkit.framework import ModelFileCheckpointIO


class LightGBMCheckpointIO(ModelFileCheckpointIO):
    """A ``lightgbm.Booster`` saved with ``save_model`` as text (``model.txt`` unless ``filename``).

    Example::

        booster = LightGBMCheckpointIO().load(result.checkpoint)   # verified first
    """

    default_filename = "model.txt"

    def load_model(self, path: str) -> Any:
        import lightgbm

        return lightgbm.Booster(model_file=path)
