"""``MyFrameworkTrainer``: a ``DataParallelTrainer`` that only picks the default config."""

from __future__ import annotations

from typing import Any, Callable

from trainkit import DataParallelTrainer

from trainkit_myframework.config import MyFrameworkConfig


class MyFrameworkTrainer(DataParallelTrainer):
    """Run a MyFramework training function on every worker, communication set up.

    Example::

        MyFrameworkTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    """

    def __init__(self, train_loop_per_worker: Callable, *, myframework_config: MyFrameworkConfig | None = None,
                 **kwargs: Any):
        if myframework_config is not None and not isinstance(myframework_config, MyFrameworkConfig):
            raise TypeError(f"myframework_config must be a MyFrameworkConfig, got {type(myframework_config).__name__}")
        kwargs.setdefault("backend_config", myframework_config or MyFrameworkConfig())
        super().__init__(train_loop_per_worker, **kwargs)
