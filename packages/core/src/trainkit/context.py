"""Functions a training function calls (``report``, ``get_context``, ``get_checkpoint``, ...) and
the types they take and return (``TrainContext``, ``CheckpointUploadMode``, ...)."""

from __future__ import annotations

from typing import Any, Callable

from trainkit._internal.worker.context_types import (
    CheckpointConsistencyMode,
    CheckpointUploadMode,
    PreemptionInfo,
    TrainContext,
)
from trainkit._internal.worker.preemption import agreed_info
from trainkit._internal.worker.session import current_context, get_session
from trainkit.checkpoint import Checkpoint, ReportedCheckpoint

__all__ = ["CheckpointConsistencyMode", "CheckpointUploadMode", "PreemptionInfo", "TrainContext",
           "get_all_reported_checkpoints", "get_checkpoint", "get_context", "get_dataset_shard",
           "get_preemption_info", "report", "shard"]


def report(
    metrics: dict[str, Any],
    checkpoint: Checkpoint | None = None,
    checkpoint_dir_name: str | None = None,
    checkpoint_upload_mode: CheckpointUploadMode = CheckpointUploadMode.SYNC,
    delete_local_checkpoint_after_upload: bool | None = None,
    checkpoint_upload_fn: Callable[[Checkpoint, str], Checkpoint] | None = None,
    validation: Any = None,
) -> None:
    """Report metrics, and optionally a checkpoint, from every worker.

    Never waits for the driver. Every rank must call ``report()`` the same number of times; the
    driver consolidates report *i* once all ranks made it, keeps rank 0's metrics, and commits the
    checkpoint files that any rank attached. Metrics policy: see ``trainkit._internal.metrics``.
    ``validation=True`` (or a ``ValidationTaskConfig``; rank 0's counts) has the trainer's
    ``ValidationConfig.fn`` score the checkpoint once committed, without waiting for it.

    Example::

        for epoch in range(3):
            loss = train_one_epoch()
            with tempfile.TemporaryDirectory() as tmp:
                torch.save(model.state_dict(), f"{tmp}/model.pt")
                trainkit.report({"epoch": epoch, "loss": loss}, checkpoint=Checkpoint.from_directory(tmp))
    """
    get_session("report").report(
        metrics, checkpoint, checkpoint_dir_name, checkpoint_upload_mode,
        delete_local_checkpoint_after_upload, checkpoint_upload_fn, validation)


def get_context() -> TrainContext:
    """This worker's ranks, world size, run name and storage. Works in the training function and,
    on a worker, in functions a backend runs there before it (``worker_group.execute``).

    Example::

        ctx = trainkit.get_context()
        print(ctx.get_world_rank(), ctx.get_world_size())
    """
    return current_context("get_context")


def get_checkpoint() -> Checkpoint | None:
    """The checkpoint to resume from: the last committed one of this run, or None on a fresh start."""
    return get_session("get_checkpoint").checkpoint


def get_dataset_shard(name: str = "train", *, dataset_name: str | None = None) -> Any:
    """This worker's part of the dataset passed to the trainer as ``datasets={name: ...}``: for a
    Ray Dataset, a ``DataIterator`` over this rank's shard (or over all rows when
    ``DataConfig(datasets_to_split=...)`` leaves it whole); any other object as it was given.
    ``dataset_name=`` is Ray Train's spelling of ``name``.

    Example::

        shard = trainkit.get_dataset_shard("train")
        for epoch in range(3):
            for batch in shard.iter_batches(batch_size=64):
                ...
    """
    if dataset_name is not None:
        name = dataset_name
    datasets = get_session("get_dataset_shard").datasets
    if name not in datasets:
        raise KeyError(f"no dataset named {name!r}; the trainer was given {sorted(datasets) or 'none'}")
    return datasets[name]


def get_all_reported_checkpoints(
    consistency_mode: CheckpointConsistencyMode = CheckpointConsistencyMode.VALIDATED,
    timeout_s: float | None = None,
) -> list[ReportedCheckpoint]:
    """Every checkpoint committed so far in this attempt, as ``ReportedCheckpoint(checkpoint,
    metrics, status)``, once all checkpoints this rank reported are committed (or ``timeout_s``
    passed). Both modes wait for commits only; see ``CheckpointConsistencyMode``.

    Example::

        for reported in trainkit.get_all_reported_checkpoints():
            print(reported.checkpoint.path, reported.metrics["loss"])
    """
    CheckpointConsistencyMode(consistency_mode)  # a bad value raises, naming it
    return get_session("get_all_reported_checkpoints").all_reported_checkpoints(timeout_s)


def get_preemption_info() -> PreemptionInfo | None:
    """None, or the preemption coming for this run: a node of its workers drained with a deadline
    (``ray drain-node``, the autoscaler or KubeRay reclaiming a spot node) or a worker process
    SIGTERM'd (deadline ``$TRAINKIT_SIGTERM_DEADLINE_S``, default 30 s, after the signal).

    Every rank gets the same answer at the same call (rank 0's: the others wait for rank 0 at that
    call, rank 0 waits for nobody), so call it the same number of times on every rank, e.g. once a
    step. Save a just-in-time checkpoint and keep training: at the deadline (plus
    ``FailureConfig.preemption_grace_s``) the driver restarts the run from the latest checkpoint,
    counted against ``FailureConfig.max_preemption_failures``. A function that returns finishes.

    Example::

        saved = False
        for step in range(start, steps):
            train_one_step()
            if trainkit.get_preemption_info() is not None and not saved:
                trainkit.report({"step": step}, checkpoint=save(step))  # commits before the deadline
                saved = True
    """
    return agreed_info(get_session("get_preemption_info"))


def shard(data: Any, rank: int | None = None, world_size: int | None = None) -> Any:
    """This rank's contiguous part of ``data``: rows of a NumPy array or pandas frame, items of a
    list (e.g. file names), anything with ``len`` and slicing. Parts differ in size by at most
    one; rank and world size default to this worker's.

    Example::

        x_train, y_train = trainkit.shard(x), trainkit.shard(y)       # rows of this rank
        files = trainkit.shard(sorted(glob.glob("data/part-*.parquet")))
    """
    if rank is None or world_size is None:
        context = current_context("shard")
        rank = context.get_world_rank() if rank is None else rank
        world_size = context.get_world_size() if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} is invalid: expected 0 <= rank < world_size={world_size}")
    size = len(data)
    if size < world_size:
        raise ValueError(f"data has {size} rows/items, fewer than the {world_size} workers: every rank needs one")
    start, stop = rank * size // world_size, (rank + 1) * size // world_size
    return data.iloc[start:stop] if hasattr(data, "iloc") else data[start:stop]
