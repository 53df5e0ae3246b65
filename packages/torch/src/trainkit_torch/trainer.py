"""``TorchTrainer``: a ``DataParallelTrainer`` whose workers share a torch process group."""

from __future__ import annotations

from typing import Any, Callable

from trainkit import DataParallelTrainer

from trainkit_torch.config import TorchConfig


class TorchTrainer(DataParallelTrainer):
    """Run a PyTorch training function on every worker with ``torch.distributed`` initialized.

    Example::

        trainer = TorchTrainer(train_fn, train_loop_config={"lr": 1e-3},
                               scaling_config=ScalingConfig(num_workers=2))
        result = trainer.fit()
    """

    def __init__(self, train_loop_per_worker: Callable, *, torch_config: TorchConfig | None = None,
                 **kwargs: Any):
        if torch_config is not None and not isinstance(torch_config, TorchConfig):
            raise TypeError(f"torch_config must be a TorchConfig, got {type(torch_config).__name__}")
        kwargs.setdefault("backend_config", torch_config or TorchConfig())
        super().__init__(train_loop_per_worker, **kwargs)
