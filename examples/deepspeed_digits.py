"""DeepSpeed ZeRO-2 on scikit-learn's bundled digits, on 2 CPU workers.

`deepspeed.initialize` joins the process group trainkit formed; ZeRO-2 partitions the optimizer state
and gradients across the workers. Each epoch every rank saves its own shards with
`engine.save_checkpoint`, and trainkit commits them as one checkpoint that a restart loads back.
The first run on a machine builds DeepSpeed's C++ ops (about 40 s); later runs reuse them.

    pip install 'trainkit-hf[deepspeed]'
    python examples/deepspeed_digits.py
"""

from __future__ import annotations

import tempfile

import trainkit
from trainkit_torch import TorchTrainer

DEEPSPEED = {
    "train_micro_batch_size_per_gpu": 32,
    "zero_optimization": {"stage": 2},
    "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
}


def train_fn(config: dict) -> None:
    import deepspeed
    import torch
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    import trainkit_torch

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    train = TensorDataset(torch.tensor(x_train, dtype=torch.float32), torch.tensor(y_train))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=DEEPSPEED)
    loader = trainkit_torch.prepare_data_loader(DataLoader(train, batch_size=32, shuffle=True))  # a new order each epoch

    start = 0
    checkpoint = trainkit.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            _, client_state = engine.load_checkpoint(directory)
        start = client_state["epoch"] + 1
    for epoch in range(start, config["epochs"]):
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(engine(xb), yb)
            engine.backward(loss)
            engine.step()
        with torch.no_grad():
            predictions = engine(torch.tensor(x_test, dtype=torch.float32)).argmax(1)
        accuracy = (predictions == torch.tensor(y_test)).float().mean().item()
        with tempfile.TemporaryDirectory() as directory:  # this rank's shards; trainkit merges every rank's
            engine.save_checkpoint(directory, client_state={"epoch": epoch})
            trainkit.report({"epoch": epoch, "loss": loss.item(), "accuracy": accuracy},
                            checkpoint=trainkit.Checkpoint.from_directory(directory))


def main() -> trainkit.Result:
    result = TorchTrainer(train_fn, train_loop_config={"epochs": 6},
                          scaling_config=trainkit.ScalingConfig(num_workers=2),
                          run_config=trainkit.RunConfig(checkpoint_config=trainkit.CheckpointConfig(num_to_keep=2))).fit()
    print(f"epochs: {int(result.metrics['epoch']) + 1}")
    print(f"held-out accuracy: {result.metrics['accuracy']:.3f}")
    return result


if __name__ == "__main__":
    main()
