"""Experiment tracking: driver-side callbacks that log every report and each committed checkpoint,
with no rank-0 code in the training function.

Example::

    from trainkit.tracking import MLflowCallback, TensorBoardCallback

    run_config = trainkit.RunConfig(callbacks=[MLflowCallback(tracking_uri="http://127.0.0.1:5000"),
                                               TensorBoardCallback()])

Metrics are logged under the report's index as the step, which keeps increasing across restarts and
resumed runs. A plugin adds tracking to every run through the ``trainkit_default_callbacks`` hook.
Install the trackers with ``pip install 'trainkit-core[mlflow]'`` or ``'trainkit-core[tensorboard]'``.
"""

from trainkit.tracking._mlflow import MLflowCallback
from trainkit.tracking._tensorboard import TensorBoardCallback

__all__ = ["MLflowCallback", "TensorBoardCallback"]
