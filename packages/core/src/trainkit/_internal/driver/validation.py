"""The driver's validator: runs ``ValidationConfig.fn`` on committed checkpoints, one at a time, in
a background thread that starts a Ray task (or calls the function, in local mode), so the
controller's loop and the workers never wait for it."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from trainkit._internal.metrics import validate_metrics
from trainkit.checkpoint import Checkpoint
from trainkit.validation import ValidationConfig, ValidationTaskConfig


class Validator:
    def __init__(self, config: ValidationConfig, use_ray: bool):
        self.config = config
        self._use_ray = use_ray
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="trainkit-validation")
        self._futures: dict[str, Future] = {}  # checkpoint name -> its validation, queued or running

    @property
    def pending(self) -> set[str]:
        return set(self._futures)

    def submit(self, name: str, checkpoint: Checkpoint, task: ValidationTaskConfig | None) -> None:
        """Queue ``checkpoint``'s validation with the default task config, updated by ``task``."""
        default = self.config.task_config
        if task is not None:
            task = ValidationTaskConfig({**default.fn_kwargs, **task.fn_kwargs},
                                        default.timeout_s if task.timeout_s is None else task.timeout_s)
        self._futures[name] = self._executor.submit(self._validate, checkpoint, task or default)

    def finished(self, wait_all: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """Validations that ended (all of them with ``wait_all``): (checkpoint name, metrics)."""
        if wait_all:
            wait(self._futures.values())
        done = [name for name, future in self._futures.items() if future.done()]
        return [(name, self._futures.pop(name).result()) for name in done]

    def _validate(self, checkpoint: Checkpoint, task: ValidationTaskConfig) -> dict[str, Any]:
        try:
            return validate_metrics(dict(self._run(checkpoint, task)))
        except Exception as exc:  # noqa: BLE001 - a failed validation is recorded, training goes on
            return {"validation_error": f"{type(exc).__name__}: {exc}"}

    def _run(self, checkpoint: Checkpoint, task: ValidationTaskConfig) -> Any:
        fn, kwargs = self.config.fn, dict(task.fn_kwargs)
        if not self._use_ray:  # local mode: no Ray; a timeout cannot stop a thread, so none is applied
            return fn(checkpoint, **kwargs)
        import ray

        ref = ray.remote(fn).options(**self.config.ray_remote_kwargs).remote(checkpoint, **kwargs)
        try:
            return ray.get(ref, timeout=task.timeout_s)
        except ray.exceptions.RayTaskError as exc:  # the function's own error, without Ray's wrapping
            raise exc.cause from None
        except ray.exceptions.GetTimeoutError:
            ray.cancel(ref, force=True)
            raise TimeoutError(f"validation did not finish within {task.timeout_s:g} s (timeout_s)") from None

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
