"""``MyFrameworkCheckpointIO``: MyFramework state in trainkit checkpoints."""

from __future__ import annotations

import os
from typing import Any

from trainkit import CheckpointIO


class MyFrameworkCheckpointIO(CheckpointIO):
    """Example::

        io = MyFrameworkCheckpointIO()
        with tempfile.TemporaryDirectory() as tmp:
            io.save(state, tmp)
            trainkit.report(metrics, checkpoint=trainkit.Checkpoint.from_directory(tmp))
        state = io.load(trainkit.get_checkpoint())   # verified against the manifest first
    """

    def save(self, state: Any, directory: str) -> None:
        import myframework  # TODO: the framework's own save

        myframework.save(state, os.path.join(directory, "state.bin"))

    def load_from_directory(self, directory: str) -> Any:
        import myframework  # TODO: the framework's own load

        return myframework.load(os.path.join(directory, "state.bin"))
