"""``TorchTrainer``: a ``DataParallelTrainer`` whose workers share a torch process group."""

from __future__ import annotations

from trainkit import DataParallelTrainer

from trainkit_torch.config import TorchConfig


class TorchTrainer(DataParallelTrainer):
    """Run a PyTorch training function on every worker with ``torch.distributed`` initialized.

    Example::

        trainer = TorchTrainer(train_fn, train_loop_config={"lr": 1e-3},
                               scaling_config=ScalingConfig(num_workers=2))
        result = trainer.fit()
    """

    config_cls = TorchConfig
    config_arg = "torch_config"
