import json
import os

import pytest

from trainkit import Checkpoint
from trainkit._internal.run_state import CheckpointRecord, RunState
from trainkit._internal.storage import MANIFEST, RunStorage, upload_dir
from trainkit.config import CheckpointConfig


@pytest.fixture
def storage(tmp_path):
    s = RunStorage(str(tmp_path / "root"), "run")
    s.ensure_run_dir()
    return s


def make_dir(path, files):
    for rel, data in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return str(path)


def test_commit_writes_manifest_and_renames(storage, tmp_path):
    src = make_dir(tmp_path / "src", {"model.pt": b"weights", "sub/opt.pt": b"o" * 10})
    tmp = storage.tmp_checkpoint_path("checkpoint_000000", 0)
    entries = upload_dir(src, storage.fs, tmp)
    final = storage.commit_checkpoint(tmp, "checkpoint_000000", entries)
    assert not os.path.exists(tmp)
    manifest = json.loads(open(os.path.join(final, MANIFEST)).read())
    assert manifest["files"]["sub/opt.pt"]["size"] == 10
    assert len(manifest["files"]["model.pt"]["sha256"]) == 64
    assert open(os.path.join(final, "model.pt"), "rb").read() == b"weights"


def test_sweep_removes_only_temporary_dirs(storage, tmp_path):
    upload_dir(make_dir(tmp_path / "a", {"f": b"1"}), storage.fs, storage.tmp_checkpoint_path("checkpoint_000001", 3))
    os.makedirs(storage.path("checkpoint_000000"))
    assert storage.sweep_tmp() == [".tmp-checkpoint_000001-3"]
    assert sorted(os.listdir(storage.run_path)) == ["checkpoint_000000"]


def test_state_is_replaced_atomically_and_torn_state_falls_back(storage):
    RunState("run", next_report_index=3).save(storage)
    RunState("run", next_report_index=7).save(storage)
    assert RunState.load(storage.fs, storage.run_path).next_report_index == 7
    with open(storage.path("run_state.json"), "r+") as f:
        f.truncate(20)  # a torn write
    assert RunState.load(storage.fs, storage.run_path).next_report_index == 3


def test_retention_keeps_best_latest_and_protected():
    state = RunState("run")
    for i, acc in enumerate([0.5, 0.9, 0.7, 0.6]):
        state.add_checkpoint(CheckpointRecord(f"c{i}", i, 0, {"acc": acc}))
    config = CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="acc")
    dropped = state.apply_retention(config, protect={"c0"})
    assert sorted(c.name for c in dropped) == ["c2"]
    assert [c.name for c in state.ranked(config)] == ["c1", "c3", "c0"]


def test_checkpoint_round_trip_and_metadata(tmp_path):
    ckpt = Checkpoint.from_directory(make_dir(tmp_path / "c", {"a.txt": b"hello"}))
    ckpt.set_metadata({"step": 1})
    ckpt.update_metadata({"lr": 0.1})
    assert ckpt.get_metadata() == {"step": 1, "lr": 0.1}
    out = ckpt.to_directory(str(tmp_path / "out"))
    assert open(os.path.join(out, "a.txt")).read() == "hello"
    with ckpt.as_directory() as path:
        assert path == ckpt.path
    assert Checkpoint.from_directory(ckpt.path) == ckpt
