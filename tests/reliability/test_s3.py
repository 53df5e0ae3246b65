"""An s3:// run against a real S3-compatible server (SeaweedFS on loopback): checkpoints, fails over, resumes."""

import json
import os
import posixpath
import time
import uuid

import pyarrow.fs as pafs

import trainkit
from trainkit._internal.storage.metrics_log import read_metrics_log
from trainkit import DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig
from trainkit.testing.steps import report_step, resume_step


def train_fn(config):
    ctx = trainkit.get_context()
    start = resume_step()
    for step in range(start, config["steps"]):
        shard = {f"shard-{ctx.get_world_rank()}": str(step).encode()}
        report_step(step, {"step": step, "start": start}, files=shard)
        print(f"rank {ctx.get_world_rank()} step {step}")
        open(os.path.join(config["markers"], f"{ctx.get_attempt()}-{step}-{ctx.get_world_rank()}"), "w").close()
        if step == 2 and ctx.get_attempt() == 0 and ctx.get_world_rank() == 1:
            while not os.path.exists(os.path.join(config["markers"], "0-2-0")):  # report 2 returned on rank 0 too
                time.sleep(0.01)
            time.sleep(0.5)
            os._exit(1)
    return start


def test_s3_run_checkpoints_fails_over_and_resumes(ray_cluster, s3_server, figure, tmp_path):
    config = RunConfig(name="s3run", storage_path=s3_server["uri"], verbose=0,
                       failure_config=FailureConfig(max_failures=1),
                       checkpoint_config=trainkit.CheckpointConfig(num_to_keep=2))
    two = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})
    first = DataParallelTrainer(train_fn, train_loop_config={"steps": 5, "markers": str(tmp_path)}, scaling_config=two, run_config=config).fit()
    fs = s3_server["fs"]
    run = "bucket/runs/s3run"
    names = sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(run))
                   if i.type == pafs.FileType.Directory and i.base_name.startswith("checkpoint_"))
    assert names[-2:] == ["checkpoint_000003", "checkpoint_000004"] and len(names) <= 3, names
    assert first.checkpoint.path == f"{run}/checkpoint_000004"
    manifest = first.checkpoint.verify()
    assert sorted(manifest["files"]) == ["shard-0", "shard-1", "step"]
    state = json.loads(fs.open_input_stream(f"{run}/run_state.json").read())
    lines = read_metrics_log(fs, run)
    last_commit = max(line["metrics"]["step"] for line in lines if line["attempt"] == 0 and line["checkpoint"])
    # attempt 1 resumed right after the last commit of attempt 0 (what rank 1 sent before it died
    # reached the driver, however slow the commits of this object store were)
    assert len(state["failures"]) == 1 and first.return_value == last_commit + 1 >= 1
    logs = {attempt: fs.open_input_stream(f"{run}/logs/attempt_{attempt}/rank_1.txt").read().decode()
            for attempt in (0, 1)}  # uploaded as each attempt ended, the failed one's too
    assert "rank 1 step 0" in logs[0] and "rank 1 step 4" in logs[1]

    second = DataParallelTrainer(train_fn, train_loop_config={"steps": 7, "markers": str(tmp_path)}, scaling_config=two, run_config=config).fit()
    with second.checkpoint.as_directory() as path:
        last = open(os.path.join(path, "step")).read()
    figure("R9", f"s3:// on SeaweedFS: 5 steps with 1 worker death (resumed at step {first.return_value}, right "
                 f"after the last commit), re-run resumed at step {second.return_value}, last checkpoint step {last} verified")
    assert second.return_value == 5 and last == "6"


def test_s3_server_listens_on_loopback_and_only_on_ports_it_was_given(s3_server):
    """No fixed port (SeaweedFS 4.48 opens Iceberg on 8181 and Lance on 9101 unless told not to): two
    copies of the suite side by side must not collide."""
    import psutil

    listening = {c.laddr for c in psutil.Process(s3_server["pid"]).net_connections("inet") if c.status == "LISTEN"}
    assert listening and {ip for ip, _ in listening} == {"127.0.0.1"}, listening
    assert {port for _, port in listening} <= s3_server["ports"], listening


def test_s3_upload_in_place_cut_short_is_swept_and_never_loaded(s3_server, tmp_path):
    from trainkit._internal.storage.run_storage import RunStorage
    from trainkit._internal.storage.checkpoint_files import upload_dir

    storage = RunStorage(s3_server["uri"], f"cut{uuid.uuid4().hex[:6]}")
    storage.preflight()
    (tmp_path / "model.bin").write_bytes(b"x" * 100)
    assert storage.upload_path("checkpoint_000000", 0, 0, reused=False).endswith(".tmp-checkpoint_000000-0-0")
    storage.sweep()  # what an attempt's start does: now the driver knows what storage holds
    place = storage.upload_path("checkpoint_000000", 0, 0, reused=False)
    assert place == storage.path("checkpoint_000000", f".attempt-0-{storage.driver_id}")  # the attempt's own folder
    upload_dir(str(tmp_path), storage.fs, place)  # a crash here: files, no manifest
    assert storage.committed_checkpoints() == []
    assert storage.sweep() == ["checkpoint_000000"] and not storage.exists("checkpoint_000000")
    upload_dir(str(tmp_path), storage.fs, place)
    storage.commit_checkpoint(place, "checkpoint_000000", [], {"index": 0})
    assert trainkit.Checkpoint(storage.path("checkpoint_000000"), storage.fs).verify()["data"] == posixpath.basename(place)
    storage.sweep()
    assert storage.upload_path("checkpoint_000000", 1, 0, reused=False) != place  # committed: never written over
    assert storage.upload_path("checkpoint_000001", 1, 1, reused=True) != storage.path("checkpoint_000001")
    assert storage.upload_path("latest", 1, 1, reused=False) != storage.path("latest")  # sweep can't tell it's ours


def _peak_growth_mib(fn) -> tuple[float, object]:
    """(MiB the process's peak RSS rose above its RSS at the start while ``fn`` ran, ``fn()``): the
    kernel's high-water mark (VmHWM), reset first through /proc/self/clear_refs, so no spike is missed
    and none from before counts."""
    def status(key: str) -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))  # kB

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    before = status("VmRSS")
    value = fn()
    return (status("VmHWM") - before) / 1024, value


def big_checkpoint_fn(config):
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(dir=config["scratch"])
    block = os.urandom(16 << 20)
    for i in range(config["files"]):
        with open(os.path.join(folder, f"shard-{i}.bin"), "wb") as f:
            for _ in range(config["mib"] // 16):
                f.write(block)
    del block
    growth, _ = _peak_growth_mib(lambda: trainkit.report(
        {"step": 0}, checkpoint=trainkit.Checkpoint.from_directory(folder)))  # SYNC: uploaded on return
    shutil.rmtree(folder)
    return growth


def test_s3_upload_and_restore_of_a_large_checkpoint_hold_bounded_memory(ray_cluster, s3_server, figure, tmp_path):
    """Issue 44 item 4: pyarrow's S3 stream queued every part of a file in memory (rank 0 grew by
    ~300 MiB over 768 MiB); now at most a few parts are in flight, whatever the checkpoint's size."""
    files, mib, bound = 3, 256, 160
    result = DataParallelTrainer(
        big_checkpoint_fn, train_loop_config={"files": files, "mib": mib, "scratch": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(name=f"big{uuid.uuid4().hex[:6]}", storage_path=s3_server["uri"], verbose=0)).fit()
    upload = result.return_value
    manifest = result.checkpoint.verify()  # every byte uploaded, and whole
    assert sorted(manifest["files"]) == [f"shard-{i}.bin" for i in range(files)]
    assert {e["size"] for e in manifest["files"].values()} == {mib << 20}

    def restore():
        with result.checkpoint.as_directory() as path:
            return sorted(os.listdir(path))

    download, restored = _peak_growth_mib(restore)
    assert restored == [".manifest.json", *(f"shard-{i}.bin" for i in range(files))]
    try:
        import boto3
    except ImportError:
        boto3 = None
    if boto3 is not None:  # the flushes forced no undersized part (S3 refuses parts under 5 MiB but the last)
        client = boto3.client("s3", endpoint_url=f"http://{s3_server['endpoint']}", region_name="us-east-1",
                              aws_access_key_id=s3_server["access_key"], aws_secret_access_key=s3_server["secret_key"])
        key = posixpath.join(result.checkpoint.path.split("/", 1)[1], manifest.get("data", ""), "shard-0.bin")
        parts = client.head_object(Bucket="bucket", Key=key, PartNumber=1).get("PartsCount", 1)
        sizes = [client.head_object(Bucket="bucket", Key=key, PartNumber=n)["ContentLength"] for n in range(1, parts + 1)]
        assert sum(sizes) == mib << 20 and min(sizes[:-1], default=5 << 20) >= 5 << 20, sizes
    figure("R9", f"s3:// checkpoint of {files} x {mib} MiB: the rank's peak RSS rose {upload:.0f} MiB over "
                 f"report(), the restore's {download:.0f} MiB (bound {bound} MiB)")
    assert upload < bound and download < bound, (upload, download)
    result.checkpoint.filesystem.delete_dir(result.checkpoint.path)
