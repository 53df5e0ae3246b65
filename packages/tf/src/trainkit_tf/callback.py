"""``ReportCallback``: Keras logs to ``trainkit.report``, with model checkpoints. Importing this
module imports TensorFlow; the class derives from ``tf.keras.callbacks.Callback``, so from tf-keras
or Keras 3, whichever ``tf.keras`` is in this process."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

import trainkit
from trainkit import Checkpoint
from trainkit.framework import MetricNames

from trainkit_tf.checkpoint import KerasCheckpointIO

INDEXED = ("epoch_begin", "epoch_end", "train_batch_begin", "train_batch_end", "test_batch_begin",
           "test_batch_end", "predict_batch_begin", "predict_batch_end")  # hooks Keras calls with an index
HOOKS = (*INDEXED, "train_begin", "train_end", "test_begin", "test_end", "predict_begin", "predict_end")


def _hooks(field: str, value: str | list[str]) -> list[str]:
    hooks = [value] if isinstance(value, str) else value
    if not isinstance(hooks, (list, tuple)) or not hooks or any(h not in HOOKS for h in hooks):
        raise ValueError(f"{field}={value!r} is invalid: expected one or a list of {list(HOOKS)}")
    return list(hooks)


def _plain(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


class ReportCallback(tf.keras.callbacks.Callback):
    """Reports Keras's logs at the chosen hooks (Keras's hook names without ``on_``); at
    ``checkpoint_on`` hooks the report carries a checkpoint of the model (``KerasCheckpointIO``,
    rank 0's copy). Works in ``model.fit`` and in ``trainkit_tf.fit_loop``.

    Args:
        checkpoint_on: hook(s) that report with a checkpoint, e.g. ``"epoch_end"`` or ``"train_end"``.
        report_metrics_on: hook(s) that report the logs only (a hook in both checkpoints).
        metrics: which logs to report: a name, a list of names or ``{reported_name: keras_name}``;
            all when None.
        filename: the model file in the checkpoint (``.keras``).

    Example::

        model.fit(dataset, epochs=3, steps_per_epoch=10, callbacks=[ReportCallback(metrics=["loss"])])
        model = ReportCallback.get_model(result.checkpoint)
    """

    def __init__(self, checkpoint_on: str | list[str] = "epoch_end", report_metrics_on: str | list[str] = "epoch_end",
                 metrics: str | list[str] | dict[str, str] | None = None, filename: str = "model.keras"):
        super().__init__()
        self._checkpoint_on = _hooks("checkpoint_on", checkpoint_on)
        self._report_on = _hooks("report_metrics_on", report_metrics_on)
        self._metrics = MetricNames(metrics, framework="Keras")
        self._io = KerasCheckpointIO(filename)
        # Only the chosen hooks exist on the instance: Keras skips per-batch work for hooks left at default.
        for when in {*self._checkpoint_on, *self._report_on}:
            if when in INDEXED:
                setattr(self, f"on_{when}", lambda index, logs=None, _when=when: self._handle(_when, logs))
            else:
                setattr(self, f"on_{when}", lambda logs=None, _when=when: self._handle(_when, logs))

    @classmethod
    def get_model(cls, checkpoint: Checkpoint, filename: str = "model.keras") -> Any:
        """The model in a checkpoint this callback reported, verified against its manifest."""
        return KerasCheckpointIO(filename).load(checkpoint)

    def _handle(self, when: str, logs: dict | None) -> None:
        metrics = self._metrics.select({name: _plain(value) for name, value in (logs or {}).items()})
        if when in self._checkpoint_on:
            self._io.report(metrics, self.model)  # every rank saves; rank 0's file is kept
        else:
            trainkit.report(metrics)
