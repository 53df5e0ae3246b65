"""trainkit-myframework: MyFramework on trainkit.

Example::

    MyFrameworkTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
"""

from trainkit_myframework.checkpoint import MyFrameworkCheckpointIO
from trainkit_myframework.config import MyFrameworkConfig
from trainkit_myframework.trainer import MyFrameworkTrainer

__all__ = ["MyFrameworkCheckpointIO", "MyFrameworkConfig", "MyFrameworkTrainer"]
