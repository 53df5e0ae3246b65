"""``KerasCheckpointIO``: a Keras model (weights, optimizer state, config) as one ``.keras`` file."""

from __future__ import annotations

import importlib
import json
import os
import tempfile
import zipfile
from typing import Any

import trainkit
from trainkit import Checkpoint, CheckpointIO


def keras_module(model: Any) -> Any:
    """The Keras a model (or loss, layer, ...) belongs to: ``tf_keras`` (Keras 2) or ``keras`` (3)."""
    for cls in type(model).__mro__:  # the first Keras class, past the user's own subclasses
        root = cls.__module__.split(".")[0]
        if root in ("keras", "tf_keras"):
            return importlib.import_module(root)
    raise TypeError(f"expected a Keras object, got a {type(model).__name__}")


class KerasCheckpointIO(CheckpointIO):
    """A Keras model saved with ``model.save`` in the ``.keras`` format. ``load`` picks the Keras
    that wrote it (tf-keras or Keras 3), whichever ``tf.keras`` is; call it under
    ``strategy.scope()`` to resume training across workers.

    Example::

        KerasCheckpointIO().report({"loss": loss}, model)               # rank 0's file is kept
        with strategy.scope():
            model = KerasCheckpointIO().load(trainkit.get_checkpoint())  # verified, then loaded
    """

    def __init__(self, filename: str = "model.keras"):
        self.filename = self.check_filename(filename)
        if not filename.endswith(".keras"):
            raise ValueError(f"filename={filename!r} is invalid: expected a name ending in '.keras'")

    def save(self, state: Any, directory: str) -> None:
        # tf-keras picks the format by a thread-local flag that its own first .keras save resets in
        # threads other than the importing one (later saves there would write HDF5): name the format.
        legacy = keras_module(state).__name__ == "tf_keras"
        state.save(os.path.join(directory, self.filename), **({"save_format": "keras_v3"} if legacy else {}))

    def report(self, metrics: dict[str, Any], state: Any) -> None:
        """Every rank saves and reports; only rank 0's file goes into the checkpoint. Every rank
        must save: under a multi-worker strategy, saving reads sync-on-read variables (e.g.
        tf-keras's metrics), which all-reduces across workers."""
        with tempfile.TemporaryDirectory() as tmp:
            self.save(state, tmp)
            chief = trainkit.get_context().get_world_rank() == 0
            trainkit.report(metrics, checkpoint=Checkpoint.from_directory(tmp) if chief else None)

    def load_from_directory(self, directory: str) -> Any:
        path = os.path.join(directory, self.filename)
        with zipfile.ZipFile(path) as archive:
            version = json.loads(archive.read("metadata.json"))["keras_version"]
        keras = importlib.import_module("tf_keras" if int(version.split(".")[0]) < 3 else "keras")
        return keras.models.load_model(path)
