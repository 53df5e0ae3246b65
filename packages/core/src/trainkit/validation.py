"""Asynchronous validation: score committed checkpoints in a separate Ray task while training goes on.

Example::

    def validate(checkpoint, split="val"):
        model = load(checkpoint)
        return {"val_accuracy": evaluate(model, split)}

    trainer = trainkit.DataParallelTrainer(train_fn, validation_config=trainkit.ValidationConfig(validate),
        run_config=trainkit.RunConfig(checkpoint_config=trainkit.CheckpointConfig(
            num_to_keep=2, checkpoint_score_attribute="val_accuracy")))

    # in train_fn, every rank:
    trainkit.report({"loss": loss}, checkpoint=checkpoint, validation=True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

__all__ = ["ValidationConfig", "ValidationTaskConfig", "check_int", "check_positive", "invalid"]


def invalid(field_name: str, value: Any, allowed: str) -> ValueError:
    """The error for a bad setting, naming it and what is allowed: raise it from ``__post_init__``.

    Example::

        raise invalid("init_method", self.init_method, "'env' or 'tcp'")
    """
    return ValueError(f"{field_name}={value!r} is invalid: expected {allowed}")


def check_positive(field_name: str, value: Any) -> None:
    """``value`` is a number > 0 (not a bool), e.g. ``check_positive("timeout_s", self.timeout_s)``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise invalid(field_name, value, "a number > 0")


def check_int(field_name: str, value: Any, minimum: int, meaning: str = "") -> None:
    """``value`` is an int >= ``minimum`` (not a bool); ``meaning`` explains a special value,
    e.g. ``check_int("frequency", frequency, 0, "0: only at the end")``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise invalid(field_name, value, f"an int >= {minimum}" + (f" ({meaning})" if meaning else ""))


@dataclass(frozen=True)
class ValidationTaskConfig:
    """One validation's settings; ``report(validation=ValidationTaskConfig(...))`` overrides the
    trainer's ``ValidationConfig.task_config`` for that checkpoint (its ``fn_kwargs`` update the
    default ones; its ``timeout_s``, when set, replaces the default).

    Attributes:
        fn_kwargs: keyword arguments for the validation function.
        timeout_s: cancel the validation after this long (None: no limit); the checkpoint's
            metrics then get ``validation_error``.
    """

    fn_kwargs: Mapping[str, Any] | None = None
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fn_kwargs", {} if self.fn_kwargs is None else self.fn_kwargs)
        if not isinstance(self.fn_kwargs, Mapping) or not all(isinstance(k, str) for k in self.fn_kwargs):
            raise invalid("fn_kwargs", self.fn_kwargs, "a dict of keyword arguments")
        if self.timeout_s is not None and (isinstance(self.timeout_s, bool) or not isinstance(
                self.timeout_s, (int, float)) or self.timeout_s <= 0):
            raise invalid("timeout_s", self.timeout_s, "None or a number of seconds > 0")


@dataclass(frozen=True)
class ValidationConfig:
    """How the driver validates checkpoints reported with ``validation=True``.

    ``fn(checkpoint, **fn_kwargs) -> dict`` runs as a Ray task (one at a time, in report order)
    on the committed checkpoint; the metrics it returns are merged into that checkpoint's metrics,
    where ``CheckpointConfig.checkpoint_score_attribute`` can rank them. Training never waits for
    it; the run's end waits for the validations still pending. A checkpoint waiting for its
    validation is not deleted by retention.

    Attributes:
        fn: the validation function; must be picklable (a module-level function).
        task_config: default ``ValidationTaskConfig`` (keyword arguments, timeout).
        ray_remote_kwargs: options of the Ray task (default ``{"num_cpus": 0}``: it does not wait
            for training's CPUs; ask for what it needs, e.g. ``{"num_gpus": 1}``).
    """

    fn: Callable[..., Mapping[str, Any]]
    task_config: ValidationTaskConfig | None = None
    ray_remote_kwargs: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.task_config is None:
            object.__setattr__(self, "task_config", ValidationTaskConfig())
        if self.ray_remote_kwargs is None:
            object.__setattr__(self, "ray_remote_kwargs", {"num_cpus": 0})
        if not callable(self.fn):
            raise invalid("fn", self.fn, "a function fn(checkpoint, **kwargs) -> dict of metrics")
        if not isinstance(self.task_config, ValidationTaskConfig):
            raise invalid("task_config", self.task_config, "a trainkit.ValidationTaskConfig")
        if not isinstance(self.ray_remote_kwargs, Mapping):
            raise invalid("ray_remote_kwargs", self.ray_remote_kwargs, 'a dict of Ray task options like {"num_cpus": 1}')
