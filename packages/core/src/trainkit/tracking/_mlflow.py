"""``MLflowCallback``: a trainkit run as an MLflow run."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from trainkit.callbacks import RunContext, UserCallback
from trainkit.tracking._scalars import flat_params, require, scalar_metrics

if TYPE_CHECKING:
    from trainkit.checkpoint import Checkpoint
    from trainkit.result import Result

logger = logging.getLogger("trainkit.tracking")

RUN_PATH_TAG = "trainkit.run_path"
CHECKPOINT_TAG = "trainkit.checkpoint."  # + checkpoint name: its URI
FLUSH_TIMEOUT_S = 60.0  # how long the end of a run waits for queued tracking calls
_BATCH = 100  # MLflow's log_batch limit on params and tags per call
_MODES = ("link", "artifact", None)


class MLflowCallback(UserCallback):
    """Logs a run to MLflow: the ``train_loop_config`` as params, every report's numeric metrics
    (rank 0's, nested dicts as ``outer/inner``) with the report index as step, and each committed
    checkpoint, as a link (tag ``trainkit.checkpoint.<name>`` holding its URI) or with
    ``log_checkpoints="artifact"`` as artifacts under ``checkpoints/<name>``.

    The MLflow run is found again by the trainkit run's path (tag ``trainkit.run_path``), so a
    resumed run continues its MLflow run. Connecting happens in ``on_run_start``, before any worker
    starts, so a wrong address fails fast. After that, metrics and tags go out on a background thread:
    a slow or unreachable server never holds up training, and a failed call is logged, not raised.
    Artifact uploads happen in the driver as each checkpoint commits (a retention policy cannot
    delete a checkpoint mid-upload).

    Args:
        tracking_uri: default ``$MLFLOW_TRACKING_URI``, else MLflow's own default.
        experiment_name: created when missing; default ``$MLFLOW_EXPERIMENT_NAME``, else "Default".
        tags: extra tags for the MLflow run.
        log_checkpoints: "link" (default), "artifact", or None.
    """

    def __init__(self, tracking_uri: str | None = None, experiment_name: str | None = None,
                 tags: dict[str, str] | None = None, log_checkpoints: str | None = "link"):
        if log_checkpoints not in _MODES:
            raise ValueError(f"MLflowCallback(log_checkpoints={log_checkpoints!r}) is invalid: expected one of {_MODES}")
        if tags is not None and not isinstance(tags, dict):
            raise TypeError(f"MLflowCallback(tags=...) must be a dict, got {type(tags).__name__}")
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.tags = dict(tags or {})
        self.log_checkpoints = log_checkpoints
        self._reset()

    def _reset(self) -> None:
        self._client: Any = None
        self.run_id: str | None = None
        self._queue: ThreadPoolExecutor | None = None
        self._failures = 0

    def __getstate__(self) -> dict[str, Any]:  # the client and thread stay in the driver
        return {k: v for k, v in self.__dict__.items() if k in ("tracking_uri", "experiment_name", "tags",
                                                                "log_checkpoints")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    # -- hooks -----------------------------------------------------------------------------------
    def on_run_start(self, run_context: RunContext) -> None:
        if self.run_id is None:
            self._open(run_context)
        self._submit(self._client.set_tag, self.run_id, "trainkit.attempt", str(run_context.attempt))

    def after_report(self, run_context: RunContext, metrics: list[dict[str, Any]],
                     checkpoint: "Checkpoint | None") -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(key, value, now, run_context.report_index)
                 for key, value in scalar_metrics(metrics[0]).items()]
        for start in range(0, len(batch), 1000):  # log_batch takes at most 1000 metrics
            self._submit(self._client.log_batch, self.run_id, metrics=batch[start:start + 1000])
        if checkpoint is None or self.log_checkpoints is None:
            return
        name = checkpoint.path.rstrip("/").rsplit("/", 1)[-1]
        self._submit(self._client.set_tag, self.run_id, CHECKPOINT_TAG + name, checkpoint.uri)
        if self.log_checkpoints == "artifact":
            with checkpoint.as_directory() as directory:
                self._call(self._client.log_artifacts, self.run_id, directory, f"checkpoints/{name}")

    def on_run_end(self, run_context: RunContext, result: "Result") -> None:
        if self.run_id is None:
            return
        self._submit(self._client.set_terminated, self.run_id, "FAILED" if result.error else "FINISHED")
        done: Future = self._queue.submit(lambda: None)
        try:
            done.result(timeout=FLUSH_TIMEOUT_S)
        except TimeoutError:
            logger.warning("MLflow did not take the run's last metrics within %.0f s; they are dropped",
                           FLUSH_TIMEOUT_S)
        self._queue.shutdown(wait=False, cancel_futures=True)
        if self._failures:
            logger.warning("%d MLflow call(s) failed during run %s (MLflow run %s)",
                           self._failures, run_context.name, self.run_id)
        self._reset()

    # -- MLflow ----------------------------------------------------------------------------------
    def _open(self, run_context: RunContext) -> None:
        require("mlflow", "mlflow", "MLflowCallback")
        from mlflow import MlflowClient
        from mlflow.entities import Param, RunStatus

        client = MlflowClient(tracking_uri=self.tracking_uri)
        experiment_id = self._experiment_id(client)
        path = run_context.path.replace("'", "\\'")
        found = client.search_runs([experiment_id], filter_string=f"tags.`{RUN_PATH_TAG}` = '{path}'",
                                   max_results=1)
        if found:
            run_id = found[0].info.run_id
            client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        else:
            tags = {**self.tags, RUN_PATH_TAG: run_context.path}
            run_id = client.create_run(experiment_id, run_name=run_context.name, tags=tags).info.run_id
            params = [Param(key, value[:6000]) for key, value in flat_params(run_context.config).items()]
            for start in range(0, len(params), _BATCH):
                client.log_batch(run_id, params=params[start:start + _BATCH])
        self._client, self.run_id = client, run_id
        self._queue = ThreadPoolExecutor(1, thread_name_prefix="trainkit-mlflow")
        logger.info("MLflow run %s (experiment %s) at %s", run_id, experiment_id, client.tracking_uri)

    def _experiment_id(self, client: Any) -> str:
        from mlflow.exceptions import MlflowException

        name = self.experiment_name or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "Default"
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return client.create_experiment(name)
        except MlflowException:  # created meanwhile by another run
            return client.get_experiment_by_name(name).experiment_id

    def _submit(self, fn: Callable, *args: Any, **kwargs: Any) -> None:
        self._queue.submit(self._call, fn, *args, **kwargs)

    def _call(self, fn: Callable, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - tracking never fails training
            self._failures += 1
            if self._failures == 1:
                logger.warning("MLflow %s failed, training goes on: %s", fn.__name__, exc)
