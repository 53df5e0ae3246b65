"""An Accelerate training loop on scikit-learn's bundled digits, on 2 CPU workers.

The loop is Accelerate's own: `Accelerator()` with no arguments is distributed because trainkit
started the workers and their process group; `prepare` shards the data loader across them. Each epoch
is reported with a checkpoint (`accelerator.save_state`), and a restart resumes from it.

    python examples/accelerate_digits.py
"""

from __future__ import annotations

import tempfile

import trainkit
from trainkit_torch import TorchTrainer


def train_fn(config: dict) -> None:
    import torch
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    accelerator = Accelerator()
    set_seed(0)
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    as_tensors = lambda a, b: TensorDataset(torch.tensor(a, dtype=torch.float32), torch.tensor(b))  # noqa: E731
    train = DataLoader(as_tensors(x_train, y_train), batch_size=32, shuffle=True)
    test = DataLoader(as_tensors(x_test, y_test), batch_size=128)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    model, optimizer, train, test = accelerator.prepare(model, optimizer, train, test)

    start = 0
    checkpoint = trainkit.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            accelerator.load_state(directory)
            start = int(open(f"{directory}/epoch").read()) + 1
    for epoch in range(start, config["epochs"]):
        model.train()
        for xb, yb in train:
            loss = nn.functional.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for xb, yb in test:
                predictions, labels = accelerator.gather_for_metrics((model(xb).argmax(1), yb))
                correct += (predictions == labels).sum().item()
                total += len(labels)
        with tempfile.TemporaryDirectory() as directory:
            accelerator.save_state(directory)  # model, optimizer and RNG states of every process
            if accelerator.is_main_process:
                open(f"{directory}/epoch", "w").write(str(epoch))
            trainkit.report({"epoch": epoch, "loss": loss.item(), "accuracy": correct / total},
                            checkpoint=trainkit.Checkpoint.from_directory(directory))


def main() -> trainkit.Result:
    result = TorchTrainer(train_fn, train_loop_config={"lr": 1e-2, "epochs": 5},
                          scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    print(f"epochs: {int(result.metrics['epoch']) + 1}")
    print(f"held-out accuracy: {result.metrics['accuracy']:.3f}")
    return result


if __name__ == "__main__":
    main()
