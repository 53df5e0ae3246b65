"""Experiment tracking: driver-side callbacks that log every report and each committed checkpoint,
with no rank-0 code in the training function.

Example::

    from trainkit.tracking import MLflowCallback, TensorBoardCallback, WandbCallback

    run_config = trainkit.RunConfig(callbacks=[MLflowCallback(tracking_uri="http://127.0.0.1:5000"),
                                               TensorBoardCallback(), WandbCallback(project="digits")])

Metrics are logged under the report's index as the step, which keeps increasing across restarts and
resumed runs.
Install the trackers with ``pip install 'trainkit-core[mlflow]'``, ``'trainkit-core[tensorboard]'`` or
``'trainkit-core[wandb]'``. ``TrackingCallback`` is the base for writing another tracker's callback.
"""

from trainkit.tracking._base import TrackingCallback
from trainkit.tracking._mlflow import MLflowCallback
from trainkit.tracking._scalars import flat_params, scalar_metrics
from trainkit.tracking._tensorboard import TensorBoardCallback
from trainkit.tracking._wandb import WandbCallback

__all__ = ["MLflowCallback", "TensorBoardCallback", "TrackingCallback", "WandbCallback", "flat_params",
           "scalar_metrics"]
