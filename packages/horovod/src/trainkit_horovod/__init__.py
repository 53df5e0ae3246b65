"""trainkit-horovod: Horovod on trainkit, over Gloo (no MPI, no ``horovodrun``).

Install Horovod once per environment with ``python -m trainkit_horovod.build`` (torch first).

Example::

    import trainkit
    from trainkit_horovod import HorovodTrainer

    def train_fn(config):
        import horovod.torch as hvd
        hvd.init()
        optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                             named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        ...
        trainkit.report({"loss": loss.item()})

    HorovodTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
"""

from trainkit_horovod.config import HorovodConfig
from trainkit_horovod.trainer import HorovodTrainer

__all__ = ["HorovodConfig", "HorovodTrainer"]
