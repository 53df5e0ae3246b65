"""R11-R16 (issue 20 B): exclusive run locks, no lost checkpoints, storage faults survived.

Real contenders (processes racing for a lock), a real SeaweedFS server stopped mid-run, a real
tmpfs filled up, real driver SIGKILLs.
"""

import errno
import json
import os
import posixpath
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest

import trainkit
from trainkit import DataParallelTrainer, ScalingConfig, StorageError, TrainingFailedError
from trainkit._internal.storage import lock
from trainkit._internal.storage.lock import RunLock, driver_alive
from trainkit._internal.storage.metrics_log import SEGMENT_LINES, SEGMENTS, MetricsLog, read_metrics_log
from trainkit._internal.storage.run_storage import QUARANTINE, RunStorage
from trainkit.testing.steps import report_step, resume_step

TWO = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})
CONTENDER = Path(__file__).parent / "_contender.py"


def resumable(config):
    start = resume_step()
    for step in range(start, config["steps"]):
        report_step(step, {"step": step}, rank0_only=True)
    return start


def stale_lease(heartbeat_age_s: float) -> str:
    """The lease a crashed driver leaves: this host, its pid now another process's (PID 1), an old heartbeat."""
    return json.dumps({"host": socket.gethostname(), "boot": lock.boot_id(), "pid": 1, "started": "-1",
                       "token": uuid.uuid4().hex, "heartbeat": time.time() - heartbeat_age_s})


def test_r11_crashed_driver_with_reused_pid_does_not_block_the_run(ray_cluster, run_config, figure):
    config = run_config()
    storage = RunStorage(config.storage_path, config.name)
    storage.preflight()
    storage.write_text(".lock", stale_lease(3600))
    assert not driver_alive(storage)
    start = time.monotonic()
    result = DataParallelTrainer(resumable, train_loop_config={"steps": 2}, scaling_config=TWO,
                                 run_config=config).fit()
    figure("R11", f"lease of a crashed driver whose pid is alive (PID 1), heartbeat 1 h old: taken over, "
                  f"run finished in {time.monotonic() - start:.1f} s")
    assert result.metrics == {"step": 1}
    lock = RunLock(storage)
    lock.acquire()
    assert driver_alive(storage)
    lock.release()
    assert not driver_alive(storage)


@pytest.mark.parametrize("store", ["local", "s3"])
def test_r12_lock_is_exclusive_among_racing_processes(store, tmp_path, s3_server, figure, processes):
    """6 processes race for the lock of 16 runs at the same instant: 8 fresh, 8 held by a crashed
    driver (takeover). Exactly one wins each round."""
    contenders, rounds = 6, 16
    if store == "local":
        root, fs, base = str(tmp_path / "runs"), pafs.LocalFileSystem(), str(tmp_path / "runs")
        os.makedirs(root)
    else:
        prefix = f"race-{uuid.uuid4().hex[:8]}"
        root = s3_server["uri"].replace("bucket/runs", f"bucket/{prefix}")
        fs, base = s3_server["fs"], f"bucket/{prefix}"
    for r in range(rounds // 2, rounds):  # the takeover rounds
        fs.create_dir(f"{base}/race{r}")
        with fs.open_output_stream(f"{base}/race{r}/.lock") as f:
            f.write(stale_lease(3600).encode())
    go = tmp_path / "go"
    done = tmp_path / "done"
    procs = [processes.start([sys.executable, str(CONTENDER), root, str(rounds), str(go), str(tmp_path / f"ready{i}"),
                              str(done)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(contenders)]
    deadline = time.monotonic() + 300  # a guard against a hang, not a speed
    while sum((tmp_path / f"ready{i}").exists() for i in range(contenders)) < contenders:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.05)
    go.write_text(str(time.time() + 0.5))
    outcomes = []
    for p in procs:  # every winner stays alive (its lease live) until all rounds are decided
        outcomes += [json.loads(line) for line in (p.stdout.readline() for _ in range(rounds)) if line]
    done.touch()
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
    winners = {r: sorted(o["pid"] for o in outcomes if o["round"] == r and o["won"]) for r in range(rounds)}
    errors = {o["error"] for o in outcomes if not o["won"]}
    figure("R12", f"{store}: {contenders} processes raced for {rounds} run locks ({rounds // 2} takeovers of a "
                  f"crashed driver's lease): winners per round {sorted({len(w) for w in winners.values()})}")
    assert all(len(w) == 1 for w in winners.values()), [o for o in outcomes if len(winners[o["round"]]) != 1]
    assert all(e.startswith("RunLockedError") for e in errors), errors


def test_r13_storage_error_keeps_errno_and_path_from_a_worker(ray_cluster, run_config):
    def fail(config):
        raise StorageError("upload", "/data/ckpt/model.pt", OSError(errno.ENOSPC, "No space left on device"))

    with pytest.raises(TrainingFailedError) as info:
        DataParallelTrainer(fail, scaling_config=TWO, run_config=run_config()).fit()
    cause = info.value.__cause__
    assert isinstance(cause, StorageError), repr(cause)
    assert (cause.errno, cause.filename, cause.operation) == (errno.ENOSPC, "/data/ckpt/model.pt", "upload")


def test_r14_damaged_manifest_is_quarantined_not_deleted(ray_cluster, run_config, figure):
    config = run_config()
    DataParallelTrainer(resumable, train_loop_config={"steps": 3}, scaling_config=TWO, run_config=config).fit()
    run = os.path.join(config.storage_path, config.name)
    manifest = os.path.join(run, "checkpoint_000002", ".manifest.json")
    with open(manifest, "r+b") as f:
        f.truncate(40)  # a torn write
    with pytest.warns(RuntimeWarning, match="damaged") as warned:
        result = DataParallelTrainer(resumable, train_loop_config={"steps": 4}, scaling_config=TWO,
                                     run_config=config).fit()
    kept = os.listdir(os.path.join(run, QUARANTINE))
    assert len(kept) == 1 and kept[0].startswith("checkpoint_000002-")
    assert open(os.path.join(run, QUARANTINE, kept[0], "step")).read() == "2"  # the data, intact
    figure("R14", f"damaged manifest of the newest checkpoint: moved to {QUARANTINE}/ with its data, warned "
                  f"({str(warned[0].message)[:60]}...); rerun resumed at step {result.return_value}")
    assert result.return_value == 2


def _fill_disk(config):
    for step in range(config["steps"]):
        if step == config["fill_at"] and trainkit.get_context().get_world_rank() == 0:
            with open(os.path.join(config["disk"], "filler"), "wb") as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass
        trainkit.report({"step": step, "pad": "x" * 6000})  # longer than a page: a full disk tears it


def test_r15_disk_full_mid_metrics_line_then_rerun_reads_and_plots(ray_cluster, run_config, small_tmpfs, tmp_path, figure):
    config = run_config(storage_path=str(small_tmpfs / "runs"))
    loop = {"steps": 5, "fill_at": 2, "disk": str(small_tmpfs)}
    start = time.monotonic()
    with pytest.raises((TrainingFailedError, StorageError)) as info:
        DataParallelTrainer(_fill_disk, train_loop_config=loop, scaling_config=TWO, run_config=config).fit()
    detect_s = time.monotonic() - start
    cause = info.value
    while cause is not None and not isinstance(cause, StorageError):
        cause = cause.__cause__ or cause.__context__
    assert isinstance(cause, StorageError) and cause.errno == errno.ENOSPC, repr(info.value)
    log = os.path.join(config.storage_path, config.name, "metrics.jsonl")
    torn = open(log, "rb").read()
    # the failed append was truncated back to the last whole line (none, when the disk filled before
    # the driver wrote its first batch of lines)
    assert torn.endswith(b"\n") or torn == b"", torn[-200:]
    for line in torn.splitlines():
        json.loads(line, parse_constant=lambda constant: pytest.fail(f"bare {constant}"))
    os.remove(small_tmpfs / "filler")  # the user frees space and runs again
    result = DataParallelTrainer(_fill_disk, train_loop_config={**loop, "fill_at": -1}, scaling_config=TWO,
                                 run_config=config).fit()
    frame = result.metrics_dataframe
    from trainkit.cli import main

    png = tmp_path / "m.png"
    assert main(["plot", os.path.join(config.storage_path, config.name), "--metric", "step", "-o", str(png)]) == 0
    figure("R15", f"disk full mid metrics line (real 2 MiB tmpfs): StorageError ENOSPC after {detect_s:.1f} s; "
                  f"the log ends with a whole line ({len(torn.splitlines())} lines); rerun: metrics_dataframe "
                  f"{len(frame)} rows, trainkit plot ok")
    assert list(frame["step"])[-5:] == [0, 1, 2, 3, 4], frame  # the rerun's reports
    assert list(frame["report_index"]) == sorted(set(frame["report_index"])) and png.stat().st_size > 0


@pytest.mark.parametrize("per_flush", [1, 1000])
def test_r16_s3_metrics_log_appends_by_segments(s3_server, per_flush):
    """One report per flush (a driver keeping up) or all at once (a driver behind on a backlog):
    each PUT rewrites one short segment, and a backlog costs one PUT per segment."""
    storage = RunStorage(s3_server["uri"], f"seg{uuid.uuid4().hex[:8]}")
    storage.preflight()
    log = MetricsLog(storage)
    puts = []
    write_text = storage.write_text
    storage.write_text = lambda *args: (puts.append(args[0]), write_text(*args))  # counts, then writes
    n = 2 * SEGMENT_LINES + 50
    for i in range(n):
        log.append({"index": i, "attempt": 0, "time": 0.0, "checkpoint": None, "metrics": {"i": i}})
        if (i + 1) % per_flush == 0:
            log.flush()
    log.flush()
    segments = storage.fs.get_file_info(pafs.FileSelector(storage.path(SEGMENTS)))
    lines = [storage.fs.open_input_stream(info.path).read().count(b"\n") for info in segments]
    assert sorted(lines) == [50, SEGMENT_LINES, SEGMENT_LINES], lines
    assert len(puts) == (n if per_flush == 1 else 3), len(puts)
    assert [r["index"] for r in read_metrics_log(storage.fs, storage.run_path)] == list(range(n))


def test_r16_s3_reused_checkpoint_name_survives_a_driver_kill_mid_commit(s3_server, run_driver, figure):
    name, options = f"reuse{uuid.uuid4().hex[:6]}", {"checkpoint_dir_name": "latest"}
    first = run_driver(s3_server["uri"], name, 4, env={"TRAINKIT_FAULT_POINT": "before_manifest:index=2"}, **options)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    second = run_driver(s3_server["uri"], name, 4, **options)
    assert second.returncode == 0, second.stderr[-3000:]
    start = json.loads(second.stdout.strip().splitlines()[-1])["start"]
    fs, run = s3_server["fs"], f"bucket/runs/{name}"
    trainkit.Checkpoint(f"{run}/latest", fs).verify()
    figure("R16", f"s3://, checkpoint_dir_name reused, driver SIGKILL while the new copy replaced the old: "
                  f"rolled forward, rerun resumed at step {start} (expected 3); checkpoints lost 0")
    assert start == 3


def test_r16_s3_driver_killed_before_committing_a_checkpoint_uploaded_in_place(s3_server, run_driver, figure):
    """On S3 a new checkpoint is uploaded into place (no copy at the commit, bench P4-S3): killed before
    its manifest, it is a directory without one, never loaded, and swept by the rerun."""
    name = f"inplace{uuid.uuid4().hex[:6]}"
    first = run_driver(s3_server["uri"], name, 4, env={"TRAINKIT_FAULT_POINT": "before_commit:index=2"})
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    fs, run = s3_server["fs"], f"bucket/runs/{name}"

    def listed():
        return sorted(posixpath.relpath(i.path, run) for i in fs.get_file_info(
            pafs.FileSelector(run, recursive=True)) if "checkpoint" in i.path)

    in_place = [p for p in listed() if p.startswith("checkpoint_000002/")]  # in its attempt's folder, no manifest
    assert [p for p in in_place if p.endswith("/blob.bin")] == [f"checkpoint_000002/.attempt-0-{p.split('-')[-1]}"
                                                                 "/blob.bin" for p in in_place if p.count("/") == 1]
    assert not [p for p in in_place if p.endswith(".manifest.json")], in_place
    assert not [p for p in listed() if p.startswith(".tmp-")], listed()  # no copy of it anywhere
    second = run_driver(s3_server["uri"], name, 4)
    assert second.returncode == 0, second.stderr[-3000:]
    start = json.loads(second.stdout.strip().splitlines()[-1])["start"]
    for checkpoint in {p.split("/")[0] for p in listed()}:
        trainkit.Checkpoint(f"{run}/{checkpoint}", fs).verify()
    figure("R16", f"s3://, checkpoint uploaded in place, driver SIGKILL before its manifest: rerun resumed "
                  f"at step {start} (expected 2); every checkpoint left verifies")
    assert start == 2


def test_r17_s3_outage_of_10s_is_survived(own_s3_server, run_driver, figure):
    server, steps = own_s3_server, 16
    uri, fs = server.settings()["uri"], server.fs
    driver = run_driver(uri, "outage", steps, wait=False, sleep=0.25, max_failures=3)
    run = "bucket/runs/outage"
    deadline = time.monotonic() + 120
    while len(read_metrics_log(fs, run)) < 4:
        assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
        time.sleep(0.2)
    server.stop()
    down_at = time.time()
    time.sleep(10)
    server.start()
    up_at = time.time()
    out, err = driver.communicate(timeout=240)
    assert driver.returncode == 0, err[-3000:]
    state = json.loads(fs.open_input_stream(f"{run}/run_state.json").read())
    log = read_metrics_log(fs, run)
    resumed = min(r["time"] for r in log if r["time"] > up_at)
    steps_checkpointed = {m["step"] for _, m in trainkit.Result.from_path(run, fs).best_checkpoints}  # manifests
    for c in state["checkpoints"]:
        trainkit.Checkpoint(f"{run}/{c['name']}", fs).verify()
    failed_at = [f["time"] - down_at for f in state["failures"]]
    figure("R17", f"S3 server down 10 s mid-run (max_failures=3): {len(state['failures'])} attempt failure(s)"
                  f"{f' detected after {failed_at[0]:.1f} s' if failed_at else ''}; reports resumed "
                  f"{resumed - up_at:.1f} s after the server was back; {len(steps_checkpointed)}/{steps} steps "
                  f"checkpointed, all verify; checkpoints lost 0")
    assert steps_checkpointed == set(range(steps))
