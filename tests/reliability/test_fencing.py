"""Fencing: a writer of an earlier attempt (a worker cut off from the cluster that goes on
uploading: a zombie) never lands in a checkpoint a later attempt committed, on S3 or on a disk.

The writers are the workers' real upload path (``Session.report``, sync and async), each holding
the copy of the run's storage its attempt sent it; the commits and sweeps are the driver's.
The two-host version, with a real partition, is in tests/multihost."""

import json
import os
import pickle

import pyarrow.fs as pafs
import pytest

from trainkit import Checkpoint
from trainkit._internal.worker.session import Session
from trainkit._internal.storage.run_storage import MANIFEST, RunStorage
from trainkit.context import CheckpointUploadMode, TrainContext
from trainkit.errors import RunLockedError, TrainkitWarning

NAME = "checkpoint_000003"


@pytest.fixture(params=["disk", "s3"])
def storage(request, tmp_path):
    if request.param == "s3":
        uri = request.getfixturevalue("s3_server")["uri"]
    else:
        uri = str(tmp_path / "runs")
    run = RunStorage(uri, f"fence-{request.node.name.replace('[', '-').rstrip(']')}")
    run.preflight()
    yield run
    run.delete_dir(run.run_path)


def as_worker(storage: RunStorage, attempt: int, sink: list) -> Session:
    """Rank 1 of ``attempt``, holding the storage its attempt sent it (as pickled to a Ray worker)."""
    copy = pickle.loads(pickle.dumps(storage))
    context = TrainContext(world_rank=1, world_size=2, local_rank=0, local_world_size=1, node_rank=1,
                           experiment_name=storage.name, attempt=attempt, storage=copy)
    return Session(context, copy, sink.append, next_index=3, checkpoint=None)


def report_shard(session: Session, tmp_path, data: bytes, mode: CheckpointUploadMode) -> None:
    directory = tmp_path / f"local-{data.decode()}"
    directory.mkdir()
    (directory / "shard-1").write_bytes(data)
    session.report({"loss": 1.0}, checkpoint=Checkpoint.from_directory(str(directory)),
                   checkpoint_upload_mode=mode, delete_local_checkpoint_after_upload=False)
    session.finish()


def every_file(storage: RunStorage) -> dict[str, bytes]:
    found = storage.fs.get_file_info(pafs.FileSelector(storage.run_path, recursive=True))
    return {os.path.relpath(i.path, storage.run_path): storage.fs.open_input_stream(i.path).read()
            for i in found if i.type == pafs.FileType.File}


@pytest.mark.parametrize("mode", [CheckpointUploadMode.SYNC, CheckpointUploadMode.ASYNC])
def test_an_earlier_attempts_late_upload_never_lands_in_a_committed_checkpoint(storage, tmp_path, mode):
    storage.sweep()  # attempt 0 starts
    zombie = as_worker(storage, attempt=0, sink=[])  # its upload of report 3 is held (partition)
    storage.sweep()  # attempt 1 starts; its rank 1 reports 3 and the driver commits it
    committed = []
    report_shard(as_worker(storage, attempt=1, sink=committed), tmp_path, b"attempt-1", mode)
    [report] = committed
    path = storage.commit_checkpoint(report.tmp_path, NAME, report.files, {"index": 3, "attempt": 1, "metrics": {}})

    report_shard(zombie, tmp_path, b"zombie", mode)  # the partition heals: attempt 0 finishes its upload

    checkpoint = Checkpoint(path, storage.fs)
    checkpoint.verify()
    with checkpoint.as_directory() as directory:
        assert sorted(os.listdir(directory)) == [MANIFEST, "shard-1"]  # the same on every store
        assert open(os.path.join(directory, "shard-1"), "rb").read() == b"attempt-1"
    storage.sweep([NAME])  # the next attempt's (or fit's) sweep deletes what the zombie left
    assert b"zombie" not in every_file(storage).values()
    checkpoint.verify()


def test_a_zombies_upload_after_retention_deleted_the_checkpoint_is_swept(storage, tmp_path):
    storage.sweep()
    zombie = as_worker(storage, attempt=0, sink=[])
    storage.sweep()
    committed = []
    report_shard(as_worker(storage, attempt=1, sink=committed), tmp_path, b"attempt-1", CheckpointUploadMode.SYNC)
    [report] = committed
    path = storage.commit_checkpoint(report.tmp_path, NAME, report.files, {"index": 3, "attempt": 1, "metrics": {}})
    storage.delete_dir(path)  # retention
    report_shard(zombie, tmp_path, b"zombie", CheckpointUploadMode.SYNC)
    storage.sweep()
    assert every_file(storage) == {}


def test_a_driver_that_lost_its_lease_writes_nothing(tmp_path, monkeypatch):
    """A driver cut off from storage (or frozen) for longer than the lease lasts is taken over; when
    it comes back, its commits, state writes, metrics and deletes are refused, not written."""
    from trainkit._internal.storage import lock
    from trainkit._internal.storage.metrics_log import MetricsLog
    from trainkit._internal.storage.run_storage import STATE

    stale = RunStorage(str(tmp_path / "runs"), "driven")
    stale.preflight()
    stale_lock = lock.RunLock(stale)
    stale_lock.acquire()
    stale_lock._released.set()  # its heartbeat thread ends: this test beats for it (_renew)
    stale.fence = stale_lock.check
    stale.write_json_atomic(STATE, {"by": "stale"})
    lease = json.loads(stale.read_text(lock.LOCK))  # a driver of another host, frozen: no heartbeat
    stale.write_text(lock.LOCK, json.dumps({**lease, "host": "elsewhere"}))
    stale_lock.owner["host"] = "elsewhere"

    new = RunStorage(str(tmp_path / "runs"), "driven")
    new_lock = lock.RunLock(new)
    with monkeypatch.context() as short, pytest.warns(TrainkitWarning, match="watching its heartbeat"):
        short.setattr(lock, "STALE_S", 1.0)  # the watch a takeover waits out
        short.setattr(lock, "WATCH_S", 0.1)
        new_lock.acquire()  # takes the run over once its heartbeat stood still for STALE_S
    try:
        new.fence = new_lock.check
        new.write_json_atomic(STATE, {"by": "new"})
        assert not stale_lock._renew()  # the stale driver's next heartbeat finds the new owner
        metrics = MetricsLog(stale)
        metrics.append({"index": 0})
        for write in (lambda: stale.write_json_atomic(STATE, {"by": "stale"}), metrics.flush,
                      lambda: stale.commit_checkpoint(stale.tmp_checkpoint_path(NAME, 0, 3), NAME, [], {"index": 3}),
                      lambda: stale.delete_dir(stale.path(NAME))):
            with pytest.raises(RunLockedError, match="lost its lease .taken over by host"):
                write()
        assert json.loads(new.read_text(STATE)) == {"by": "new"}
        assert not new.exists(NAME) and not new.exists("metrics.jsonl")
    finally:
        new_lock.release()


def test_a_driver_that_could_not_renew_its_lease_stops_writing(tmp_path):
    from trainkit._internal.storage import lock

    storage = RunStorage(str(tmp_path / "runs"), "silent")
    storage.preflight()
    run_lock = lock.RunLock(storage)
    run_lock.acquire()
    try:
        storage.fence = run_lock.check
        storage.write_json_atomic("run_state.json", {})
        run_lock._renewed -= lock.STALE_S  # storage unreachable that long: another driver may take over
        with pytest.raises(RunLockedError, match="not renewed for 6. s"):
            storage.write_json_atomic("run_state.json", {})
    finally:
        run_lock.release()
