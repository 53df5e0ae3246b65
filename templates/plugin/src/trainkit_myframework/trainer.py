"""``MyFrameworkTrainer``: a ``DataParallelTrainer`` that only picks the default config."""

from __future__ import annotations

from trainkit import DataParallelTrainer

from trainkit_myframework.config import MyFrameworkConfig


class MyFrameworkTrainer(DataParallelTrainer):
    """Run a MyFramework training function on every worker, communication set up.

    Example::

        MyFrameworkTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    """

    config_cls = MyFrameworkConfig  # MyFrameworkTrainer(fn, myframework_config=...) is its backend_config
    config_arg = "myframework_config"
