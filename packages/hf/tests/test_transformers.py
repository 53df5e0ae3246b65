"""transformers.Trainer on 2 real trainkit workers (DDP over gloo): a 2-layer BERT built from a config
on generated token ids, nothing downloaded."""

import dataclasses
import json
import os
import re

import pytest

import trainkit
from trainkit import FailureConfig, ScalingConfig
from trainkit.testing import requires
from trainkit_torch import TorchTrainer

ROWS, BATCH = 64, 8


def train_fn(config):
    """Train a tiny BERT classifier; on attempt 0, fail at ``fail_at_step`` if set."""
    import torch
    import transformers

    import trainkit_hf

    os.environ["HF_HUB_OFFLINE"] = "1"
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=16, num_labels=2))
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 50, (ROWS, 16), generator=generator)
    rows = [{"input_ids": row, "attention_mask": torch.ones(16, dtype=torch.long), "labels": int(row[0] < 25)}
            for row in ids]

    class FailOnce(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == config.get("fail_at_step") and trainkit.get_context().get_attempt() == 0:
                trainkit.collective.barrier()  # what every rank reported so far commits, however slow a rank
                raise RuntimeError(f"planned failure at step {state.global_step}")

    fields = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    optional = {"average_tokens_across_devices": False} if "average_tokens_across_devices" in fields else {}
    args = transformers.TrainingArguments(
        output_dir=config["output_dir"], per_device_train_batch_size=BATCH, num_train_epochs=config["epochs"],
        learning_rate=1e-3, logging_steps=2, save_strategy="epoch", report_to="none", disable_tqdm=True, seed=0,
        **{"use_cpu": True, **config.get("args", {})}, **optional)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows,
                                   callbacks=[trainkit_hf.ReportCallback(), FailOnce()])
    trainer = trainkit_hf.prepare_trainer(trainer)
    with trainkit_hf.resume_path() as path:
        trainer.train(resume_from_checkpoint=path)


def fit(run_config, tmp_path, use_gpu=False, **config):
    config = {"output_dir": str(tmp_path / "hf-output"), "epochs": 2, **config}
    return TorchTrainer(train_fn, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2, use_gpu=use_gpu),
                        run_config=run_config(failure_config=FailureConfig(max_failures=1))).fit()


def logged(result):
    return [json.loads(line) for line in open(os.path.join(result.path, "metrics.jsonl"))]


def checkpoint_files(checkpoint):
    return sorted(os.path.relpath(os.path.join(d, f), checkpoint.path)
                  for d, _, files in os.walk(checkpoint.path) for f in files)


def test_trainer_splits_the_data_and_reports_logs_and_checkpoints(ray_cluster, run_config, tmp_path):
    result = fit(run_config, tmp_path, args={"include_num_input_tokens_seen": True})
    lines = logged(result)
    assert lines[-2]["metrics"]["num_input_tokens_seen"] > 0  # a metric, not a credential
    saves = [line for line in lines if line["checkpoint"]]
    # 64 rows / 2 ranks / batches of 8 = 4 steps per epoch (a single process would take 8)
    assert [line["metrics"]["step"] for line in saves] == [4, 8]
    assert [line["metrics"]["epoch"] for line in saves] == [1.0, 2.0]
    losses = [line["metrics"]["loss"] for line in lines[:-1] if "loss" in line["metrics"] and not line["checkpoint"]]
    assert len(losses) == 4 and all(0.1 < loss < 2.0 for loss in losses)  # per-sample, not x world size
    summary = lines[-1]["metrics"]  # the end-of-training summary, with the latest of every metric
    assert summary["train_loss"] > 0 and summary["loss"] == losses[-1] and result.metrics == summary
    files = checkpoint_files(result.checkpoint)
    assert {"trainer_state.json", "model.safetensors", "optimizer.pt", "rng_state_0.pth", "rng_state_1.pth"} <= set(files)
    state = json.load(open(os.path.join(result.checkpoint.path, "trainer_state.json")))
    assert state["global_step"] == 8


# Transformers before 5.18 restores a multi-process CPU run's optimizer with map_location "cpu:0",
# which torch cannot restore ("don't know how to restore data location"); GPU runs are unaffected.
@requires(transformers=">=5.18")
def test_resume_continues_from_the_saved_step(ray_cluster, run_config, tmp_path):
    result = fit(run_config, tmp_path, epochs=3, fail_at_step=6)
    lines = logged(result)
    assert [line["attempt"] for line in lines if line["checkpoint"]] == [0, 1, 1]
    resumed = [line["metrics"]["step"] for line in lines if line["attempt"] == 1]
    assert resumed[0] == 6 and resumed[-1] == 12  # from the step-4 checkpoint: steps 5-12, no epoch repeated
    assert json.load(open(os.path.join(result.checkpoint.path, "trainer_state.json")))["global_step"] == 12


@requires(deepspeed=">=0.16", gpus=2)  # Accelerate runs the Trainer's DeepSpeed on GPUs only
def test_trainer_with_a_deepspeed_config_saves_every_ranks_shards(ray_cluster, run_config, tmp_path):
    zero2 = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW", "params": {"lr": "auto", "torch_adam": True}}}
    result = fit(run_config, tmp_path, use_gpu=True, epochs=1, args={"deepspeed": zero2, "use_cpu": False})
    files = checkpoint_files(result.checkpoint)
    shards = [f for f in files if f.endswith("optim_states.pt")]
    assert len(shards) == 2 and any("rank_0" in f for f in shards) and any("rank_1" in f for f in shards), files


def test_prepare_trainer_refuses_deepspeed_on_cpus_with_the_alternative(ray_cluster, run_config, tmp_path):
    pytest.importorskip("deepspeed")
    with pytest.raises(trainkit.TrainingFailedError, match=r"needs GPUs.*deepspeed.initialize in the training function"):
        fit(run_config, tmp_path, epochs=1, args={"deepspeed": {"zero_optimization": {"stage": 2}}, "use_cpu": False})


def test_hugging_face_datasets_built_in_the_driver_are_refused_before_any_work(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_dict({"x": [1, 2, 3]})

    def captures():
        return len(rows)

    storage = tmp_path / "runs"
    for trainer, where in [
        (TorchTrainer(lambda config: None, train_loop_config={"train": rows}), "train_loop_config['train']"),
        (TorchTrainer(captures), "captures 'rows'"),
    ]:
        trainer.run_config = trainkit.RunConfig(storage_path=str(storage), verbose=0)
        with pytest.raises(TypeError, match=re.escape(where) + ".*datasets.Dataset built in the driver"):
            trainer.fit()
    assert not storage.exists()  # nothing started, nothing written
