"""trainkit-torch: PyTorch on trainkit.

Example::

    import trainkit, trainkit_torch

    def train_fn(config):
        model = trainkit_torch.prepare_model(torch.nn.Linear(8, 1))
        loader = trainkit_torch.prepare_data_loader(DataLoader(dataset, batch_size=32, shuffle=True))
        ...
        trainkit.report({"loss": loss})

    trainkit_torch.TorchTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
"""

from trainkit_torch.checkpoint import TorchCheckpointIO, load_checkpoint
from trainkit_torch.config import TorchConfig
from trainkit_torch.train_loop_utils import (
    enable_reproducibility,
    get_device,
    get_devices,
    prepare_data_loader,
    prepare_model,
)
from trainkit_torch.trainer import TorchTrainer

__all__ = [
    "TorchCheckpointIO",
    "TorchConfig",
    "TorchTrainer",
    "enable_reproducibility",
    "get_device",
    "get_devices",
    "load_checkpoint",
    "prepare_data_loader",
    "prepare_model",
]
