"""``ReportCallback``: LightGBM's evaluation results to ``trainkit.report``, with model checkpoints."""

from __future__ import annotations

from typing import Any

from trainkit.framework import ReportCallbackBase

from trainkit_lightgbm.checkpoint import LightGBMCheckpointIO


class ReportCallback(ReportCallbackBase):
    """Reports the latest evaluation results and ``iteration`` (rounds in the model) every round;
    every ``frequency``-th round's report and, with ``checkpoint_at_end``, the last round's carry a
    checkpoint of the model, saved by rank 0. When early stopping ends training, the round it stops
    at is reported without the final model: report that yourself after ``lightgbm.train`` returns.

    Args:
        metrics: which results to report: a name (``"valid_0-binary_logloss"``), a list of names,
            or a dict ``{reported_name: lightgbm_name}``; all when None. Names are ``<data>-<metric>``.
        filename: the model file in the checkpoint.
        frequency: checkpoint every this many rounds; 0 checkpoints only at the end.
        checkpoint_at_end: checkpoint after the last round (unless that round already was).

    Example::

        lightgbm.train(params, train_set, valid_sets=[train_set], valid_names=["train"],
                       callbacks=[ReportCallback(metrics={"loss": "train-binary_logloss"}, frequency=10)])
        booster = ReportCallback.get_model(result.checkpoint)
    """

    CHECKPOINT_NAME = "model.txt"  # Ray Train's name for the default ``filename``
    checkpoint_io_cls = LightGBMCheckpointIO
    framework = "LightGBM"

    # After record_evaluation (20), before early_stopping (30), which ends training by raising:
    # the round that stops training is still reported; report the final model after train() returns.
    order = 25

    def _results(self, evaluation_results: list) -> dict[str, Any]:
        return self._metrics.select({f"{data}-{metric}": value for data, metric, value, *_ in evaluation_results or []})

    def __call__(self, env: Any) -> None:
        rounds = env.iteration + 1
        metrics = {**self._results(env.evaluation_result_list), "iteration": rounds}
        self.report(metrics, env.model, self.checkpoint_due(rounds, last=rounds == env.end_iteration))
