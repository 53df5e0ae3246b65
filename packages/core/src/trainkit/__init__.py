"""trainkit: run a training function on N workers, on one machine or a Ray cluster, for any framework.

Example::

    import trainkit

    def train_fn(config):
        ctx = trainkit.get_context()
        trainkit.report({"rank": ctx.get_world_rank(), "loss": 0.1})

    result = trainkit.Trainer(train_fn, backend="torch",
                              scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
"""

from trainkit.backend import Backend, BackendConfig
from trainkit.callbacks import RunContext, UserCallback
from trainkit.checkpoint import Checkpoint, ReportedCheckpoint, ReportedCheckpointStatus
from trainkit.framework import CheckpointIO
from trainkit.config import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig, SyncConfig
from trainkit.data import DataConfig
from trainkit.context import (
    CheckpointConsistencyMode,
    CheckpointUploadMode,
    PreemptionInfo,
    TrainContext,
    get_all_reported_checkpoints,
    get_checkpoint,
    get_context,
    get_dataset_shard,
    get_preemption_info,
    report,
    shard,
)
from trainkit.hookspecs import hookimpl, hookspec
from trainkit.errors import (
    CheckpointCorruptError,
    ControllerError,
    PreemptionError,
    RunLockedError,
    StorageError,
    TrainingFailedError,
    TrainkitWarning,
    WorkerGroupError,
)
from trainkit.result import Result
from trainkit.trainer import DataParallelTrainer, Trainer
from trainkit.validation import ValidationConfig, ValidationTaskConfig
from trainkit import collective, errors  # noqa: E402 - after the names they use

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "BackendConfig",
    "Checkpoint",
    "CheckpointConfig",
    "CheckpointConsistencyMode",
    "CheckpointCorruptError",
    "CheckpointIO",
    "CheckpointUploadMode",
    "ControllerError",
    "DataConfig",
    "DataParallelTrainer",
    "FailureConfig",
    "LoggingConfig",
    "PreemptionError",
    "PreemptionInfo",
    "ReportedCheckpoint",
    "ReportedCheckpointStatus",
    "Result",
    "RunConfig",
    "RunContext",
    "RunLockedError",
    "ScalingConfig",
    "StorageError",
    "SyncConfig",
    "TrainContext",
    "Trainer",
    "TrainingFailedError",
    "TrainkitWarning",
    "UserCallback",
    "ValidationConfig",
    "ValidationTaskConfig",
    "WorkerGroupError",
    "collective",
    "errors",
    "get_all_reported_checkpoints",
    "get_checkpoint",
    "get_context",
    "get_dataset_shard",
    "get_preemption_info",
    "hookimpl",
    "hookspec",
    "report",
    "shard",
]
