"""Storage is untrusted input: names and paths read back from a run directory (run_state.json,
manifests, listed directories, the lock, metrics segments) never make trainkit touch anything
outside the run directory; odd files never block a reader; links in a reported checkpoint are
refused at report() on every store. Real files, real FIFOs and symlinks, the real S3 server."""

import hashlib
import json
import os
import tempfile
import threading
import uuid
import warnings

import pyarrow.fs as pafs
import pytest

import trainkit
from trainkit import Checkpoint, CheckpointCorruptError, DataParallelTrainer, RunConfig, ScalingConfig, TrainkitWarning
from trainkit._internal.storage.lock import LOCK, RunLock
from trainkit.errors import RunLockedError
from trainkit._internal.storage.metrics_log import SEGMENTS, read_metrics_log
from trainkit._internal.storage.run_state import RunState
from trainkit._internal.storage.run_storage import MANIFEST, QUARANTINE, RunStorage
from trainkit._internal.storage.checkpoint_files import upload_dir, verify_checkpoint

PAYLOAD = b"planted by an attacker"


def _write(fs, path, data: bytes):
    fs.create_dir(os.path.dirname(path), recursive=True)
    with fs.open_output_stream(path) as f:
        f.write(data)


def _commit(storage, name, index, tmp_path, data=b"weights"):
    src = tmp_path / f"src-{uuid.uuid4().hex[:6]}"
    src.mkdir()
    (src / "w.bin").write_bytes(data)
    tmp = storage.tmp_checkpoint_path(name, 0, index)
    entries = upload_dir(str(src), storage.fs, tmp)
    return storage.commit_checkpoint(tmp, name, entries, {"index": index, "attempt": 0, "metrics": {}})


def _plant(storage, manifest_name, files=None):
    """A temporary directory whose manifest verifies and names ``manifest_name``, as a roll-forward
    candidate; and a run_state.json recording that name."""
    tmp = storage.path(".tmp-planted-0-9")
    files = files or {"payload.bin": PAYLOAD}
    for rel, data in files.items():
        if ".." not in rel or isinstance(storage.fs, pafs.LocalFileSystem):  # S3 refuses '..' in a key
            _write(storage.fs, f"{tmp}/{rel}", data)
    manifest = {"format": 1, "name": manifest_name, "index": 9, "attempt": 0, "metrics": {}, "files": {
        rel: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()} for rel, data in files.items()}}
    _write(storage.fs, f"{tmp}/{MANIFEST}", json.dumps(manifest).encode())
    state = RunState(storage.name, checkpoints=[], latest_checkpoint=manifest_name)
    data = state.to_json()
    data["checkpoints"] = [{"name": manifest_name, "index": 9, "attempt": 0, "metrics": {}}]
    _write(storage.fs, storage.path("run_state.json"), json.dumps(data).encode())


def _tree(fs, root):
    return {(i.path, i.size) for i in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))}


def _recover(storage):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = RunState.recover(storage)
    return state, [str(w.message) for w in caught]


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """(filesystem, storage root, a victim directory beside the run) on local disk or S3."""
    if request.param == "local":
        fs, root = pafs.LocalFileSystem(), str(tmp_path / "root")
    else:
        settings = request.getfixturevalue("s3_server")
        fs, root = settings["fs"], f"bucket/untrusted-{uuid.uuid4().hex[:8]}"
    victim = f"{root}/victim"
    _write(fs, f"{victim}/precious.bin", b"the user's data")
    return fs, root, victim


# -- names read back --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dotdot", "absolute", "slash", "nul", "long"])
def test_recorded_checkpoint_names_outside_the_run_are_refused(store, kind):
    fs, root, victim = store
    name = {"dotdot": "../victim", "absolute": "/" + victim.lstrip("/"),
            "slash": "sub/../../victim", "nul": "victim\0x", "long": "c" * 300}[kind]
    storage = RunStorage(root, "run", filesystem=fs)
    storage.preflight()
    _plant(storage, name)
    before = _tree(fs, victim)
    state, messages = _recover(storage)
    assert _tree(fs, victim) == before, "a name read from storage moved or deleted data outside the run"
    assert any("run_state.json" in m and "checkpoints[0].name" in m for m in messages), messages
    assert state is None or all(c.name != name for c in state.checkpoints)
    assert state is None or state.latest_checkpoint is None


def test_manifest_listing_files_outside_is_refused(store, tmp_path):
    fs, root, victim = store
    storage = RunStorage(root, "run", filesystem=fs)
    storage.preflight()
    _commit(storage, "checkpoint_000000", 0, tmp_path)
    fs.delete_file(storage.path("checkpoint_000000", MANIFEST))  # a torn replace: roll forward wanted
    _plant(storage, "checkpoint_000000", files={"ok.bin": b"x", "../../victim/precious.bin": PAYLOAD})
    before = _tree(fs, victim)
    _, messages = _recover(storage)
    assert _tree(fs, victim) == before
    assert any(MANIFEST in m and "files" in m and "../../victim/precious.bin" in m for m in messages), messages


def test_lock_token_naming_a_path_outside_fails_clearly(tmp_path):
    root = tmp_path / "root"
    storage = RunStorage(str(root), "run")
    storage.preflight()
    os.mkdir(storage.path(".lock.takeover-x"))  # so that the token's path resolves
    (root / "run" / LOCK).write_text(json.dumps({"host": "gone", "pid": 1, "token": "x/../../evil", "heartbeat": 0}))
    with pytest.raises(RunLockedError, match=r"\.lock.*token"), pytest.warns(TrainkitWarning, match="token="):
        RunLock(storage).acquire()
    assert not (root / "evil").exists()


# -- links and odd files in the run directory (local disk) ----------------------------------------
def test_symlinked_run_entries_are_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / MANIFEST).write_text("{damaged")  # looks like a checkpoint with a damaged manifest
    (outside / "precious.bin").write_bytes(b"the user's data")
    storage = RunStorage(str(tmp_path / "root"), "run")
    storage.preflight()
    quarantine_target = tmp_path / "elsewhere"
    quarantine_target.mkdir()
    os.symlink(quarantine_target, storage.path(QUARANTINE))
    os.mkdir(storage.path("checkpoint_000003"))
    (tmp_path / "root" / "run" / "checkpoint_000003" / MANIFEST).write_text("{damaged")  # to quarantine
    os.symlink(outside, storage.path("checkpoint_000001"))
    os.symlink(outside, storage.path(".tmp-checkpoint_000002-0-2"))
    os.symlink(outside, storage.path(SEGMENTS))
    before = {p: p.stat().st_mtime_ns for p in outside.iterdir()}
    _, messages = _recover(storage)
    assert {p: p.stat().st_mtime_ns for p in outside.iterdir()} == before
    assert list(quarantine_target.iterdir()) == [], "the quarantine followed a symlink out of the run"
    assert any("checkpoint_000001" in m and "symbolic link" in m for m in messages), messages
    assert any(QUARANTINE in m and "symbolic link" in m for m in messages), messages
    with pytest.warns(TrainkitWarning, match="metrics.jsonl.d is a symbolic link"):
        assert read_metrics_log(storage.fs, storage.run_path) == []


def _unblock(fifo):
    """A reader blocked on ``fifo`` gets EOF (test clean-up when the fix is missing)."""
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK) if os.path.exists(fifo) else None
    if fd is not None:
        os.close(fd)


def _returns(fn, fifo):
    """Run ``fn`` in a thread; whether it returned (instead of blocking on ``fifo``), and its outcome."""
    outcome = {}

    def call():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                outcome["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - the outcome is checked by the caller
                outcome["error"] = exc
        outcome["warnings"] = [str(w.message) for w in caught]

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(60)  # a bound on a hang, never reached by a reader that does not block
    blocked = thread.is_alive()
    while thread.is_alive():
        try:
            _unblock(fifo)
        except OSError:
            pass
        thread.join(1)
    return not blocked, outcome


@pytest.mark.parametrize("odd", ["fifo", "directory", "symlink"])
def test_verify_skips_a_checkpoint_with_an_odd_file(tmp_path, odd):
    storage = RunStorage(str(tmp_path / "root"), "run")
    storage.preflight()
    path = _commit(storage, "checkpoint_000000", 0, tmp_path)
    target = os.path.join(path, "w.bin")
    os.unlink(target)
    {"fifo": lambda: os.mkfifo(target), "directory": lambda: os.mkdir(target),
     "symlink": lambda: os.symlink("/etc/hostname", target)}[odd]()
    returned, outcome = _returns(lambda: verify_checkpoint(storage.fs, path), target)
    assert returned, "verify blocked on a non-regular file"
    assert isinstance(outcome.get("error"), CheckpointCorruptError), outcome
    assert "w.bin" in str(outcome["error"]) and "regular file" in str(outcome["error"])


def test_metrics_segment_fifo_does_not_block_readers(tmp_path):
    storage = RunStorage(str(tmp_path / "root"), "run")
    storage.preflight()
    os.mkdir(storage.path(SEGMENTS))
    os.mkfifo(storage.path(SEGMENTS, "000000000.jsonl"))
    os.mkfifo(storage.path("metrics.jsonl"))
    returned, outcome = _returns(lambda: read_metrics_log(storage.fs, storage.run_path), storage.path("metrics.jsonl"))
    assert returned and outcome.get("value") == [], outcome
    assert any("000000000.jsonl" in m and "FIFO" in m for m in outcome["warnings"]), outcome


def test_resume_skips_a_checkpoint_whose_file_became_a_fifo(run_config):
    config = run_config()

    def train(cfg):
        start = 0
        if (checkpoint := trainkit.get_checkpoint()) is not None:
            with checkpoint.as_directory() as d:
                start = int(open(os.path.join(d, "step")).read()) + 1
        for step in range(start, start + 2):
            d = os.path.join(cfg["scratch"], f"s{step}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "step"), "w") as f:
                f.write(str(step))
            trainkit.report({"step": step}, checkpoint=Checkpoint.from_directory(d))

    scratch = os.path.join(config.storage_path, "..", "scratch")
    trainer = lambda: DataParallelTrainer(train, train_loop_config={"scratch": scratch},  # noqa: E731
                                          scaling_config=ScalingConfig(num_workers=0), run_config=config)
    result = trainer().fit()
    step_file = os.path.join(result.checkpoint.path, "step")
    os.unlink(step_file)
    os.mkfifo(step_file)
    returned, outcome = _returns(lambda: trainer().fit(), step_file)
    assert returned, "resume blocked on a FIFO in the latest checkpoint"
    assert "value" in outcome, outcome.get("error")
    assert outcome["value"].metrics["step"] == 2  # resumed from step 0's checkpoint, the intact one


# -- links in a reported checkpoint ------------------------------------------------------------------
@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize("link", ["file", "directory"])
def test_symlink_in_reported_checkpoint_is_refused_at_report(tmp_path, request, where, link):
    storage_path = str(tmp_path / "storage") if where == "local" else request.getfixturevalue("s3_server")["uri"]
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("outside the checkpoint")
    reported = tmp_path / "reported"
    reported.mkdir()
    (reported / "model.bin").write_bytes(b"w")
    os.symlink(secret / "key" if link == "file" else secret, reported / "link")
    errors = []

    def train():
        try:
            trainkit.report({"x": 1}, checkpoint=Checkpoint.from_directory(reported))
        except ValueError as exc:
            errors.append(str(exc))
        trainkit.report({"x": 2})

    name = f"links{uuid.uuid4().hex[:6]}"
    result = DataParallelTrainer(train, scaling_config=ScalingConfig(num_workers=0),
                                 run_config=RunConfig(name=name, storage_path=storage_path, verbose=0)).fit()
    assert errors and str(reported / "link") in errors[0] and str(secret) in errors[0], errors
    assert result.checkpoint is None and result.metrics["x"] == 2
    fs, run_path = result.filesystem, result.path
    stored = [i.path for i in fs.get_file_info(pafs.FileSelector(run_path, recursive=True))
              if i.base_name in ("link", "key", "model.bin")]
    assert stored == [], f"files uploaded before the refusal: {stored}"


# -- downloads that fail ------------------------------------------------------------------------------
@pytest.fixture(params=["local", "s3"])
def big_checkpoint(request, tmp_path):
    """A committed checkpoint of 3 MiB (more than ``small_tmpfs`` holds), on local disk or S3."""
    if request.param == "local":
        storage = RunStorage(str(tmp_path / "root"), "run")
    else:
        storage = RunStorage(f"bucket/dl-{uuid.uuid4().hex[:8]}", "run", filesystem=request.getfixturevalue("s3_server")["fs"])
    storage.preflight()
    path = _commit(storage, "checkpoint_000000", 0, tmp_path, data=os.urandom(3 << 20))
    return Checkpoint(path, storage.fs)


@pytest.mark.parametrize("big_checkpoint", ["s3"], indirect=True)  # a local one is used in place
def test_as_directory_on_a_full_disk_removes_its_partial_copy(big_checkpoint, small_tmpfs, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(small_tmpfs))  # what TMPDIR does
    for _ in range(3):  # each attempt finds the space the previous one had
        with pytest.raises(OSError) as caught:
            with big_checkpoint.as_directory():
                pass
        assert str(small_tmpfs) in str(caught.value) and "removed" in str(caught.value), caught.value
        assert os.listdir(small_tmpfs) == []


def test_to_directory_on_a_full_disk_removes_only_what_it_wrote(big_checkpoint, small_tmpfs):
    new = small_tmpfs / "new"
    with pytest.raises(OSError, match=str(new)):
        big_checkpoint.to_directory(new)
    assert not new.exists()
    kept = small_tmpfs / "kept"
    kept.mkdir()
    (kept / "mine.txt").write_text("the user's")
    with pytest.raises(OSError, match=str(kept)):
        big_checkpoint.to_directory(kept)
    assert os.listdir(kept) == ["mine.txt"]
