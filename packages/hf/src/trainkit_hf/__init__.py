"""trainkit-hf: Hugging Face Transformers, Accelerate and DeepSpeed on trainkit.

Example::

    import transformers
    import trainkit, trainkit_hf, trainkit_torch

    def train_fn(config):
        args = transformers.TrainingArguments(output_dir="out", use_cpu=True, save_strategy="epoch",
                                              report_to="none", average_tokens_across_devices=False)
        trainer = transformers.Trainer(model=build_model(), args=args, train_dataset=build_dataset(),
                                       callbacks=[trainkit_hf.ReportCallback()])
        trainer = trainkit_hf.prepare_trainer(trainer)
        with trainkit_hf.resume_path() as path:   # the last committed checkpoint, or None
            trainer.train(resume_from_checkpoint=path)

    trainkit_torch.TorchTrainer(train_fn, scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()

``Accelerator()`` and ``deepspeed.initialize`` need nothing from this package: trainkit-torch's
process group and environment are what they expect. Importing this package imports no Hugging Face
library; ``ReportCallback`` imports transformers on first use.
"""

from trainkit.lazy import lazy_exports

from trainkit_hf._prepare import prepare_trainer, resume_path
from trainkit_hf.config import HFConfig

__all__ = ["HFConfig", "ReportCallback", "prepare_trainer", "resume_path"]


# ReportCallback subclasses transformers.TrainerCallback: built on first use.
__getattr__ = lazy_exports(__name__, {"ReportCallback": "trainkit_hf.callback"})
