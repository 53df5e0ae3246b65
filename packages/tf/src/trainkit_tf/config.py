"""``TensorflowConfig``: which Keras the workers' ``tf.keras`` is. Importing this module does not
import TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainkit import BackendConfig

LEGACY_KERAS = (None, True, False)


@dataclass
class TensorflowConfig(BackendConfig):
    """How workers join one ``MultiWorkerMirroredStrategy``: every worker gets a port and a
    ``TF_CONFIG`` naming all workers, with its rank as task index.

    Attributes:
        legacy_keras: True makes ``tf.keras`` tf-keras (Keras 2, ``TF_USE_LEGACY_KERAS=1``), whose
            ``model.fit`` trains across workers; False keeps Keras 3, which trains across workers with
            ``trainkit_tf.fit_loop`` only; None (default) picks tf-keras when it is installed, as Ray
            Train does.

    Example::

        TensorflowTrainer(train_fn, tensorflow_config=TensorflowConfig(legacy_keras=False))
    """

    # Importing TensorFlow reads no TF_CONFIG and resolves no tf.keras: safe before the setup.
    prewarm_modules: ClassVar[tuple[str, ...]] = ("tensorflow",)

    legacy_keras: bool | None = None

    def __post_init__(self) -> None:
        if not any(self.legacy_keras is value for value in LEGACY_KERAS):
            raise ValueError(f"legacy_keras={self.legacy_keras!r} is invalid: expected one of {LEGACY_KERAS}")

    @property
    def backend_cls(self):
        from trainkit_tf.backend import TensorflowBackend

        return TensorflowBackend
