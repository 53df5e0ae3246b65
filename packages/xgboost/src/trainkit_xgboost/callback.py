"""``ReportCallback``: XGBoost's evaluation results to ``trainkit.report``, with model checkpoints."""

from __future__ import annotations

from typing import Any

import xgboost
from xgboost.callback import TrainingCallback

from trainkit.framework import ReportCallbackBase

from trainkit_xgboost.checkpoint import XGBoostCheckpointIO


class ReportCallback(ReportCallbackBase, TrainingCallback):
    """Reports the latest evaluation results and ``iteration`` (rounds in the model) every round;
    every ``frequency``-th round's report carries a checkpoint of the model, saved by rank 0. With
    ``checkpoint_at_end`` one more report after the last round carries the final model, unless that
    round's report already did (XGBoost's callbacks learn which round is last only afterwards).

    Args:
        metrics: which results to report: a name (``"eval-logloss"``), a list of names, or a dict
            ``{reported_name: xgboost_name}``; all of them when None. Names are ``<eval set>-<metric>``.
        filename: the model file in the checkpoint.
        frequency: checkpoint every this many rounds; 0 checkpoints only at the end.
        checkpoint_at_end: checkpoint after the last round (unless that round already was).

    Example::

        booster = xgboost.train(params, dtrain, evals=[(dtrain, "train")], num_boost_round=50,
                                callbacks=[ReportCallback(metrics={"loss": "train-logloss"}, frequency=10)])
        booster = ReportCallback.get_model(result.checkpoint)
    """

    CHECKPOINT_NAME = "model.ubj"  # Ray Train's name for the default ``filename``
    checkpoint_io_cls = XGBoostCheckpointIO
    framework = "XGBoost"

    def __init__(self, metrics: str | list[str] | dict[str, str] | None = None, filename: str = CHECKPOINT_NAME,
                 frequency: int = 0, checkpoint_at_end: bool = True):
        super().__init__(metrics, filename, frequency, checkpoint_at_end)
        self._latest: dict[str, Any] = {}
        self._last_checkpointed: int | None = None

    def _results(self, evals_log: dict) -> dict[str, Any]:
        return self._metrics.select({f"{data}-{metric}": values[-1] for data, metrics in evals_log.items()
                                     for metric, values in metrics.items()})

    def _report(self, model: xgboost.Booster, with_checkpoint: bool) -> None:
        rounds = model.num_boosted_rounds()  # counts the rounds of a model training continued from, too
        if with_checkpoint:
            self._last_checkpointed = rounds
        self.report({**self._latest, "iteration": rounds}, model, with_checkpoint)

    def after_iteration(self, model: xgboost.Booster, epoch: int, evals_log: dict) -> bool:
        self._latest = self._results(evals_log)
        self._report(model, self.checkpoint_due(model.num_boosted_rounds()))
        return False

    def after_training(self, model: xgboost.Booster) -> xgboost.Booster:
        if self._checkpoint_at_end and self._last_checkpointed != model.num_boosted_rounds():
            self._report(model, True)
        return model
