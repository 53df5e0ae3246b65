"""Tracking callbacks against the real backends: an ``mlflow server`` (SQLite store, served artifacts)
started on loopback, and TensorBoard's own event reader."""

import os
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

import trainkit
from trainkit import FailureConfig, ScalingConfig
from trainkit.testing import find_free_port, subprocesses
from trainkit.testing.steps import report_step, resume_step

mlflow = pytest.importorskip("mlflow")
pytest.importorskip("tensorboardX")
from mlflow import MlflowClient  # noqa: E402

from trainkit.tracking import MLflowCallback, TensorBoardCallback  # noqa: E402

CONFIG = {"lr": 0.1, "model": {"layers": 2}, "marker": ""}


def train_fn(config):
    """Four reports with a checkpoint each; fails once before step 2 when ``marker`` is set."""
    for step in range(resume_step(), 4):
        if step == 2 and config["marker"] and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError("injected failure")
        report_step(step, {"loss": 1.0 / (step + 1), "eval": {"acc": 0.5 + step / 10}, "phase": "train"})


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    port = find_free_port()
    server = subprocesses.start(
        [shutil.which("mlflow", path=os.path.dirname(sys.executable)) or "mlflow", "server",
         "--backend-store-uri", f"sqlite:///{root}/mlflow.db", "--artifacts-destination", str(root / "artifacts"),
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        stdout=open(root / "server.log", "wb"), stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                subprocesses.end(server)
                pytest.fail(f"mlflow server did not start:\n{(root / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
    try:
        yield uri
    finally:
        subprocesses.end(server)  # and its gunicorn workers


def fit(run_config, callbacks, marker="", num_workers=0, max_failures=1, **run_kwargs):
    trainer = trainkit.DataParallelTrainer(
        train_fn, train_loop_config={**CONFIG, "marker": marker},
        scaling_config=ScalingConfig(num_workers=num_workers, resources_per_worker={"CPU": 1}),
        run_config=run_config(callbacks=callbacks, failure_config=FailureConfig(max_failures=max_failures),
                              **run_kwargs))
    return trainer.fit()


def mlflow_run(uri, result):
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("trainkit-tests").experiment_id],
                              filter_string=f"tags.`trainkit.run_path` = '{result.path}'")
    assert len(runs) == 1, "one MLflow run per trainkit run"
    return client, runs[0]


def steps(client, run_id, key):
    return [(m.step, round(m.value, 6)) for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def test_mlflow_receives_params_metrics_and_checkpoint_links_from_2_workers(ray_cluster, run_config, mlflow_uri):
    result = fit(run_config, [MLflowCallback(mlflow_uri, experiment_name="trainkit-tests")], num_workers=2)
    client, run = mlflow_run(mlflow_uri, result)
    assert run.info.status == "FINISHED" and run.info.run_name == os.path.basename(result.path)
    assert run.data.params == {"lr": "0.1", "model.layers": "2", "marker": ""}
    assert steps(client, run.info.run_id, "loss") == [(0, 1.0), (1, 0.5), (2, 0.333333), (3, 0.25)]
    assert steps(client, run.info.run_id, "eval/acc") == [(0, 0.5), (1, 0.6), (2, 0.7), (3, 0.8)]
    assert "phase" not in run.data.metrics  # not a number
    links = {k: v for k, v in run.data.tags.items() if k.startswith("trainkit.checkpoint.")}
    committed = [c.path for c, _ in result.best_checkpoints]
    assert sorted(links.values()) == sorted(committed) and len(committed) == 4


def test_mlflow_follows_restarts_and_resumed_runs_and_uploads_artifacts(run_config, mlflow_uri, tmp_path):
    callback = MLflowCallback(mlflow_uri, experiment_name="trainkit-tests", log_checkpoints="artifact")
    with pytest.raises(trainkit.TrainingFailedError):  # fails at step 2, no retries
        fit(run_config, [callback], marker=str(tmp_path / "failed"), max_failures=0, name="resumed")
    client, run = mlflow_run(mlflow_uri, trainkit.Result.from_path(str(tmp_path / "storage" / "resumed")))
    assert run.info.status == "FAILED"
    assert [s for s, _ in steps(client, run.info.run_id, "loss")] == [0, 1]

    result = fit(run_config, [callback], name="resumed")  # the same name resumes the run
    client, resumed = mlflow_run(mlflow_uri, result)
    assert resumed.info.run_id == run.info.run_id and resumed.info.status == "FINISHED"
    assert [s for s, _ in steps(client, run.info.run_id, "loss")] == [0, 1, 2, 3]
    assert resumed.data.tags["trainkit.attempt"] == "1"
    uploaded = [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")]
    assert len(uploaded) == 4
    local = client.download_artifacts(run.info.run_id, uploaded[-1], str(tmp_path / "download"))
    assert open(os.path.join(local, "step")).read() == "3"


def test_mlflow_unreachable_fails_before_training(run_config, monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.raises(Exception, match="127.0.0.1"):
        fit(run_config, [MLflowCallback(f"http://127.0.0.1:{find_free_port()}")], marker=str(tmp_path / "m"))
    assert not (tmp_path / "m").exists() and not list((tmp_path / "storage").glob("*/checkpoint_*"))


def test_tensorboard_event_files_hold_scalars_restarts_and_checkpoints(run_config, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = fit(run_config, [TensorBoardCallback()], marker=str(tmp_path / "failed"))  # one restart
    events = EventAccumulator(os.path.join(result.path, "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    scalars = {tag: [(e.step, round(e.value, 6)) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert scalars["loss"] == [(0, 1.0), (1, 0.5), (2, 0.333333), (3, 0.25)]
    assert scalars["eval/acc"] == [(0, 0.5), (1, 0.6), (2, 0.7), (3, 0.8)]
    assert scalars["trainkit/attempt"] == [(0, 0), (2, 1)]  # the restart resumed after report 1
    texts = {tag: [(e.step, e.tensor_proto.string_val[0].decode()) for e in events.Tensors(tag)]
             for tag in events.Tags()["tensors"]}
    assert [step for step, _ in texts["checkpoint/text_summary"]] == [0, 1, 2, 3]
    assert texts["checkpoint/text_summary"][-1][1] == result.checkpoint.path
    assert '"lr": 0.1' in texts["config/text_summary"][0][1]


def test_tracking_callbacks_refuse_bad_arguments():
    with pytest.raises(ValueError, match="log_checkpoints='files'.*'link', 'artifact', None"):
        MLflowCallback(log_checkpoints="files")
    with pytest.raises(ValueError, match="callbacks=.*trainkit.UserCallback"):
        trainkit.RunConfig(callbacks=[print])


def wandb_file_records(path):
    """The records of a ``.wandb`` file: after a 7-byte header (":W&B", 0xBEE1, version 0), LevelDB's
    log format (32 KiB blocks of chunks: crc32, length, type FULL/FIRST/MIDDLE/LAST), as wandb writes it."""
    data, block = path.read_bytes(), 32768
    assert data[:7] == b":W&B\xe1\xbe\x00", data[:7]
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            records.append(pending)
            pending = b""
    return records


def wandb_records(run_dir):
    """The history rows, summary and config of the offline W&B run under ``run_dir``, its ``.wandb``
    file's records decoded with wandb's own protobuf messages."""
    import json

    from wandb.proto import wandb_internal_pb2

    (path,) = [p for p in (run_dir / "wandb").glob("offline-run-*/run-*.wandb")]
    history, summary, config = [], {}, {}
    for data in wandb_file_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.history.item})
        elif kind == "summary":
            summary.update({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                            for item in record.summary.update})
        elif kind in ("config", "run"):
            updates = (record.config if kind == "config" else record.run.config).update
            config.update({item.key: json.loads(item.value_json) for item in updates})
    return history, summary, config


def test_wandb_offline_run_holds_config_metrics_restarts_and_checkpoints(run_config, tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    from trainkit.tracking import WandbCallback

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = fit(run_config, [WandbCallback(project="digits")], marker=str(tmp_path / "failed"))  # one restart
    # run.finish() returns before wandb's service has flushed and closed the run's file (CI read only its
    # 7-byte header twice); teardown waits for the service to end, closing every file it writes.
    wandb.teardown()
    history, summary, config = wandb_records(pathlib.Path(result.path))
    loss = [(row["_step"], round(row["loss"], 6)) for row in history if "loss" in row]
    assert loss == [(0, 1.0), (1, 0.5), (2, 0.333333), (3, 0.25)]
    assert [(row["_step"], row["trainkit/attempt"]) for row in history if "trainkit/attempt" in row] == [(0, 0), (2, 1)]
    assert [round(row["eval/acc"], 6) for row in history if "eval/acc" in row] == [0.5, 0.6, 0.7, 0.8]
    assert config["lr"] == 0.1 and config["model"] == {"layers": 2}
    assert summary["trainkit/checkpoint"] == result.checkpoint.path
