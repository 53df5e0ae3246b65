"""``WandbCallback``: a trainkit run as a Weights & Biases run."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from trainkit.callbacks import RunContext
from trainkit.tracking._base import TrackingCallback
from trainkit.tracking._scalars import require


class WandbCallback(TrackingCallback):
    """Logs a run to W&B: the ``train_loop_config`` as config, every report's numeric metrics with
    the report index as step, ``trainkit/attempt`` at each start, and each committed checkpoint's URI
    in the run summary (``trainkit/checkpoint/<name>``, and ``trainkit/checkpoint`` for the latest).

    The W&B run's id comes from the trainkit run's path, so a resumed run continues its W&B run.
    ``WANDB_MODE=offline`` writes it under ``dir`` for a later ``wandb sync``.

    Args:
        project, entity, tags: as for ``wandb.init`` (default ``$WANDB_PROJECT``, ``$WANDB_ENTITY``).
        dir: where W&B writes its files; default the run directory when it is on local disk, else
            W&B's default (the current directory).
        init_kwargs: anything else for ``wandb.init``.
    """

    def __init__(self, project: str | None = None, entity: str | None = None, tags: list[str] | None = None,
                 dir: str | os.PathLike | None = None, **init_kwargs: Any):
        if tags is not None and not (isinstance(tags, (list, tuple)) and all(isinstance(t, str) for t in tags)):
            raise TypeError(f"WandbCallback(tags={tags!r}) is invalid: expected a list of strings")
        self.project, self.entity, self.tags = project, entity, list(tags or [])
        self.dir = os.fspath(dir) if dir is not None else None
        self.init_kwargs = init_kwargs
        self.run: Any = None

    def __getstate__(self) -> dict[str, Any]:  # the W&B run stays in the driver
        return {**self.__dict__, "run": None, "_opened": False}

    def open(self, run_context: RunContext, params: dict[str, str]) -> None:
        wandb = require("wandb", "wandb", "WandbCallback")
        local = os.path.isabs(run_context.path)
        self.run = wandb.init(
            project=self.project, entity=self.entity, tags=self.tags, name=run_context.name,
            id=hashlib.sha256(run_context.path.encode()).hexdigest()[:16], resume="allow",
            config=dict(run_context.config or {}), dir=self.dir or (run_context.path if local else None),
            **self.init_kwargs)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def log_checkpoint(self, name: str, uri: str, step: int) -> None:
        self.run.summary.update({f"trainkit/checkpoint/{name}": uri, "trainkit/checkpoint": uri})

    def close(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)
        self.run = None
