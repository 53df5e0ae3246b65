"""``prepare_trainer``: refuse a Lightning ``Trainer`` that would not run on trainkit's workers."""

from __future__ import annotations

from typing import Any

import trainkit

from trainkit_lightning import _public


def prepare_trainer(trainer: Any) -> Any:
    """Check that ``trainer`` trains across trainkit's workers, and return it.

    Raises ``ValueError`` saying exactly what to change: the strategy must be one of
    trainkit_lightning's and the cluster environment ``trainkit_lightning.LightningEnvironment``.
    """
    if trainkit.get_context().get_world_size() < 2:
        return trainer  # one process: any strategy trains correctly
    strategy = trainer.strategy
    problems = []
    if not isinstance(strategy, (_public.DDPStrategy, _public.FSDPStrategy, _public.DeepSpeedStrategy)):
        problems.append(f"the strategy is {type(strategy).__module__}.{type(strategy).__name__}: pass "
                        "strategy=trainkit_lightning.DDPStrategy() (or FSDPStrategy(), DeepSpeedStrategy())")
    if not isinstance(getattr(strategy, "cluster_environment", None), _public.LightningEnvironment):
        problems.append("the cluster environment is not trainkit's: pass "
                        "plugins=[trainkit_lightning.LightningEnvironment()]")
    elif isinstance(strategy, (_public.FSDPStrategy, _public.DeepSpeedStrategy)) and strategy.root_device.type == "cpu":
        problems.append(f"{type(strategy).__name__} needs GPUs (FSDP and DeepSpeed have no CPU path): "
                        "ScalingConfig(use_gpu=True), or DDPStrategy() on CPUs")
    if problems:
        raise ValueError("this Lightning Trainer would not train across trainkit's workers:\n- " + "\n- ".join(problems))
    return trainer
