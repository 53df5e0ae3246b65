"""``HorovodTrainer``: a ``DataParallelTrainer`` whose workers share a Horovod Gloo rendezvous."""

from __future__ import annotations

from trainkit import DataParallelTrainer

from trainkit_horovod.config import HorovodConfig


class HorovodTrainer(DataParallelTrainer):
    """Run a training function on every worker; its ``hvd.init()`` joins the other workers.

    Example::

        def train_fn(config):
            import horovod.torch as hvd
            hvd.init()                                   # rank and size from trainkit's workers
            optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            ...

        HorovodTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    """

    config_cls = HorovodConfig
    config_arg = "horovod_config"
