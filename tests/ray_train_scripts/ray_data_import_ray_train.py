"""`import ray.train` then `ray.data`: a Ray Dataset split across the workers by the trainer, each
rank reading its shard with ray.train.get_dataset_shard."""

import os
import tempfile

import ray.train
import ray.train.torch


def train_func(config):
    shard = ray.train.get_dataset_shard("train")
    for epoch in range(2):
        rows = sum(len(batch["x"]) for batch in shard.iter_batches(batch_size=8))
        with tempfile.TemporaryDirectory() as tmp:  # Ray Train's result.metrics are its last checkpoint's
            open(os.path.join(tmp, "epoch"), "w").write(str(epoch))
            ray.train.report({"rows": rows, "epoch": epoch, "rank": ray.train.get_context().get_world_rank()},
                             checkpoint=ray.train.Checkpoint.from_directory(tmp))


if __name__ == "__main__":
    dataset = ray.data.from_items([{"x": i, "y": 2 * i} for i in range(64)])
    trainer = ray.train.torch.TorchTrainer(
        train_func,
        # half a CPU a worker: Ray Data's tasks need CPUs the workers leave free
        scaling_config=ray.train.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        datasets={"train": dataset.map_batches(lambda batch: {**batch, "x": batch["x"] * 1.0})},
        run_config=ray.train.RunConfig(name="ray_data_import_ray_train"),
    )
    result = trainer.fit()
    assert result.metrics["epoch"] == 1 and result.metrics["rank"] == 0
    assert 0 < result.metrics["rows"] < 64, result.metrics  # rank 0's share of the 64 rows
    print("rank 0 rows per epoch:", result.metrics["rows"])
