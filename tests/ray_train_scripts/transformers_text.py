"""A Ray Train 2.60 Transformers script, as Ray Train's docs write one: a 2-layer BERT built from a
config, trained on generated token ids with transformers.Trainer on 2 CPU workers. Its Ray Train names are reached by
`import ray.train.huggingface.transformers` and attribute access. It ran on Ray Train 2.60 once;
tests/test_ray_train_compat.py runs it on trainkit after `trainkit migrate`."""

import os

import torch
import transformers
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

import ray.train
from ray.train import RunConfig, ScalingConfig
import ray.train.huggingface.transformers
from ray.train.torch import TorchTrainer


def train_func():
    os.environ["HF_HUB_OFFLINE"] = "1"
    transformers.set_seed(0)
    ids = torch.randint(1, 50, (64, 16), generator=torch.Generator().manual_seed(0))
    train_dataset = [{"input_ids": row, "labels": int(row[0] < 25)} for row in ids]
    model = BertForSequenceClassification(BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=16))
    training_args = TrainingArguments(
        output_dir="transformers_text_output", per_device_train_batch_size=8, num_train_epochs=3,
        logging_strategy="epoch", save_strategy="epoch", use_cpu=True, report_to="none", disable_tqdm=True)
    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset)
    trainer.add_callback(ray.train.huggingface.transformers.RayTrainReportCallback())
    trainer = ray.train.huggingface.transformers.prepare_trainer(trainer)

    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as checkpoint_dir:
            checkpoint_path = os.path.join(
                checkpoint_dir, ray.train.huggingface.transformers.RayTrainReportCallback.CHECKPOINT_NAME)
            trainer.train(resume_from_checkpoint=checkpoint_path)
    else:
        trainer.train()


if __name__ == "__main__":
    trainer = TorchTrainer(train_func, scaling_config=ScalingConfig(num_workers=2),
                           run_config=RunConfig(name="transformers_text"))
    result = trainer.fit()
    print(f"epochs: {int(result.metrics['epoch'])}")
    print(result.metrics)
    assert int(result.metrics["epoch"]) == 3 and "loss" in result.metrics, result.metrics
    assert len(result.best_checkpoints) == 3  # one a epoch, 4 steps each
    with result.checkpoint.as_directory() as path:
        assert os.path.exists(os.path.join(
            path, ray.train.huggingface.transformers.RayTrainReportCallback.CHECKPOINT_NAME, "trainer_state.json"))
