"""Text classification with transformers.Trainer on 2 CPU workers: nothing is downloaded.

The reviews are generated (sentences of positive, negative and neutral words), the tokenizer is
trained on them on the spot with `tokenizers`, and the model is a 2-layer BERT built from a config.
The Trainer runs unchanged on every worker; trainkit_hf.ReportCallback turns its logs into reports and
each epoch's save into a durable trainkit checkpoint, which a re-run (or a restart) resumes from.

    python examples/hf_text_classification.py
"""

from __future__ import annotations

import os
import random
import tempfile

import trainkit
import trainkit_hf
from trainkit_torch import TorchTrainer

POSITIVE = "great superb lovely delightful brilliant moving charming excellent".split()
NEGATIVE = "awful dull boring clumsy tedious bland dreadful weak".split()
NEUTRAL = "the film plot actor scene story was and with a its of it music ending cast".split()


def reviews(count: int, seed: int) -> list[tuple[str, int]]:
    """Sentences whose label is 1 when positive words outnumber negative ones."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.random() < 0.5
        strong, weak = (POSITIVE, NEGATIVE) if label else (NEGATIVE, POSITIVE)
        words = rng.choices(NEUTRAL, k=8) + rng.choices(strong, k=3) + rng.choices(weak, k=1)
        rng.shuffle(words)
        rows.append((" ".join(words), int(label)))
    return rows


def build_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]")


def train_fn(config: dict) -> None:
    import numpy as np
    import transformers

    os.environ["HF_HUB_OFFLINE"] = "1"
    train, test = reviews(512, seed=0), reviews(128, seed=1)
    tokenizer = build_tokenizer([text for text, _ in train])

    def encode(rows):
        encoded = tokenizer([text for text, _ in rows], padding="max_length", max_length=16, truncation=True)
        return [{"input_ids": ids, "attention_mask": mask, "labels": label}
                for ids, mask, (_, label) in zip(encoded["input_ids"], encoded["attention_mask"], rows)]

    transformers.set_seed(0)
    model = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=16, num_labels=2, pad_token_id=tokenizer.pad_token_id))
    args = transformers.TrainingArguments(
        output_dir=os.path.join(tempfile.gettempdir(), "trainkit-hf", trainkit.get_context().get_experiment_name()),
        num_train_epochs=config["epochs"], per_device_train_batch_size=16, learning_rate=config["lr"],
        eval_strategy="epoch", save_strategy="epoch", logging_steps=8, use_cpu=True, report_to="none",
        disable_tqdm=True, average_tokens_across_devices=False)

    def accuracy(prediction) -> dict:
        return {"accuracy": float((np.argmax(prediction.predictions, axis=1) == prediction.label_ids).mean())}

    trainer = transformers.Trainer(model=model, args=args, train_dataset=encode(train), eval_dataset=encode(test),
                                   compute_metrics=accuracy, callbacks=[trainkit_hf.ReportCallback()])
    trainer = trainkit_hf.prepare_trainer(trainer)
    with trainkit_hf.resume_path() as path:  # the last committed checkpoint, or None
        trainer.train(resume_from_checkpoint=path)


def main() -> trainkit.Result:
    result = TorchTrainer(
        train_fn, train_loop_config={"lr": 2e-3, "epochs": 4},
        scaling_config=trainkit.ScalingConfig(num_workers=2),
        run_config=trainkit.RunConfig(checkpoint_config=trainkit.CheckpointConfig(num_to_keep=1)),
    ).fit()
    print(f"epochs: {int(result.metrics['epoch'])}")  # the last report has the latest of every metric
    print(f"held-out accuracy: {result.metrics['eval_accuracy']:.3f}")
    return result


if __name__ == "__main__":
    main()
