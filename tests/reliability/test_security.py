"""S1-S6: bad configs, metrics, names and symlinks, malicious checkpoints, credentials, listeners."""

import os
import pickle
import threading
import time

import psutil
import pytest

import trainkit
from trainkit import Checkpoint, DataParallelTrainer, RunConfig, ScalingConfig, TrainingFailedError


def test_s1_invalid_configs_rejected_at_construction(figure):
    bad = [{"num_workers": v} for v in (True, -1, 2.5, "2", (2, 1), (0, 0), 10**6)]
    bad += [{"resources_per_worker": {"CPU": -1}}, {"resources_per_worker": {"GPU": float("inf")}}]
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    rejected = 0
    for kwargs in bad:
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            ScalingConfig(**kwargs)
        rejected += 1
    started = {p.pid for p in psutil.Process().children(recursive=True)} - before
    figure("S1", f"{rejected}/{len(bad)} invalid ScalingConfig values rejected at construction naming the field; "
                 f"processes started: {len(started)}")
    assert rejected == len(bad) and not started


def test_s2_bad_metrics_rejected_at_report_with_key_path(run_config, figure):
    cases = [{"a": {1, 2}}, {"b": b"raw"}, {"c": object()}, {"nested": {"d": [0, {1}]}},
             {"big": "x" * (2 << 20)}]
    messages = []

    def fn(config):
        try:
            trainkit.report(config["metrics"])
        except ValueError as exc:
            messages.append(str(exc))
            raise

    for metrics in cases:
        with pytest.raises(TrainingFailedError):
            DataParallelTrainer(fn, train_loop_config={"metrics": metrics}, scaling_config=ScalingConfig(num_workers=0),
                                run_config=run_config()).fit()
    figure("S2", f"{len(messages)}/{len(cases)} bad metric reports rejected at report() with the key path, "
                 "e.g. " + messages[3].split(":")[0] + "; NaN/inf kept, NumPy/tensor scalars converted")
    assert len(messages) == len(cases) and messages[3].startswith("metrics['nested']['d'][1]")


def _tree_snapshot(root):
    return {os.path.join(d, f) for d, _, files in os.walk(root) for f in files} | {d for d, _, _ in os.walk(root)}


@pytest.mark.parametrize("name", ["../x", "/abs", "a/../../b", "..", ".", "a\0b", "x" * 300, "ｘ"])
def test_s3_escaping_names_rejected_before_io(tmp_path, name):
    with pytest.raises(ValueError, match="name="):
        RunConfig(name=name, storage_path=str(tmp_path / "root"))
    assert not os.path.exists(tmp_path / "root")


def test_s3_names_and_symlinks_write_nothing_outside(tmp_path, run_config, figure):
    outside, root = tmp_path / "outside", tmp_path / "root"
    outside.mkdir()
    root.mkdir()
    os.symlink(outside, root / "evil")
    before = _tree_snapshot(tmp_path)
    with pytest.raises(ValueError, match="outside the storage"):
        DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=0),
                            run_config=RunConfig(name="evil", storage_path=str(root), verbose=0)).fit()

    def sneaky():
        trainkit.report({"x": 1}, checkpoint=Checkpoint.from_directory("/tmp"), checkpoint_dir_name="../../escape")

    with pytest.raises(TrainingFailedError, match="checkpoint_dir_name"):
        DataParallelTrainer(sneaky, scaling_config=ScalingConfig(num_workers=0),
                            run_config=RunConfig(name="ok", storage_path=str(root), verbose=0)).fit()
    created = {p for p in _tree_snapshot(tmp_path) - before if not p.startswith(str(root / "ok"))}
    figure("S3", f"symlinked run dir and '../../escape' checkpoint name rejected before any write; "
                 f"paths created outside the run directory: {len(created)}")
    assert not created and not os.listdir(outside)


class _Canary:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))  # creating this file proves code ran at load time


def test_s4_malicious_pickle_is_refused_without_fallback(tmp_path, figure):
    torch = pytest.importorskip("torch")
    from trainkit_torch import load_checkpoint

    canary = tmp_path / "pwned"
    ckpt_dir = tmp_path / "ckpt"
    ckpt_dir.mkdir()
    with open(ckpt_dir / "model.pt", "wb") as f:
        torch.save({"weights": torch.ones(2), "evil": _Canary(str(canary))}, f)
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(Checkpoint.from_directory(ckpt_dir), "model.pt")
    figure("S4", f"malicious pickle in model.pt: load_checkpoint refused (weights_only=True, no fallback); "
                 f"canary created: {canary.exists()}")
    assert not canary.exists()


def test_s5_credentials_never_written_or_printed(ray_cluster, s3_server, capfd, figure):
    from trainkit._internal.storage.run_storage import RunStorage

    secret = s3_server["secret_key"]

    def fn():
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            open(os.path.join(tmp, "w"), "w").write("1")
            trainkit.report({"loss": 1.0}, checkpoint=Checkpoint.from_directory(tmp))

    config = RunConfig(name="creds", storage_path=s3_server["uri"], verbose=2)
    result = DataParallelTrainer(fn, scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 0.5}),
                                 run_config=config).fit()
    fs = s3_server["fs"]
    import pyarrow.fs as pafs

    stored = b"".join(fs.open_input_stream(i.path).read() for i in fs.get_file_info(
        pafs.FileSelector("bucket/runs/creds", recursive=True)) if i.type == pafs.FileType.File)
    out, err = capfd.readouterr()
    surfaces = {"stdout": out, "stderr": err, "repr(result)": repr(result), "repr(run_config)": repr(config),
                "repr(storage)": repr(RunStorage(config.storage_path, "creds")), "stored files": stored.decode(errors="replace")}
    hits = {k: v.count(secret) for k, v in surfaces.items()}
    figure("S5", f"secret canary occurrences across {', '.join(surfaces)}: {sum(hits.values())}")
    assert sum(hits.values()) == 0, hits


def test_s6_embedded_cluster_listens_on_loopback_only(tmp_path, figure):
    import ray

    if ray.is_initialized():
        ray.shutdown()
    seen, looked = {}, tmp_path / "looked"
    ready = [tmp_path / f"ready_{rank}" for rank in (0, 1)]

    def fn():
        ready[trainkit.get_context().get_world_rank()].touch()
        while not looked.exists():  # every process of the run is up until the look is done
            time.sleep(0.05)
        trainkit.report({"x": 1})

    def look():
        try:
            deadline = time.monotonic() + 300  # a guard against a hang, not a wait
            while not all(r.exists() for r in ready) and time.monotonic() < deadline:
                time.sleep(0.05)
            me = psutil.Process()
            pids = {p.pid for p in me.children(recursive=True)} | {me.pid}
            seen["listeners"] = {(c.laddr.ip, psutil.Process(c.pid).name()) for c in psutil.net_connections("inet")
                                 if c.status == "LISTEN" and c.pid in pids}
        finally:
            looked.touch()

    threading.Thread(target=look).start()
    DataParallelTrainer(fn, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                        run_config=RunConfig(name="listen", storage_path=str(tmp_path), verbose=0)).fit()
    ray.shutdown()
    outside = {(ip, name) for ip, name in seen["listeners"] if ip not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")}
    figure("S6", f"{len(seen['listeners'])} listening sockets of the embedded cluster during a run; beyond loopback: "
                 f"{len(outside)}")
    assert seen["listeners"] and not outside


def _listeners_of_this_process():
    trainkit.report({"rank": trainkit.get_context().get_world_rank(), "master_port": int(os.environ["MASTER_PORT"]),
                     "listeners": sorted({f"{c.laddr.ip} {c.laddr.port}" for c in psutil.Process().net_connections("inet")
                                          if c.status == "LISTEN"})})


def test_s6_torch_process_group_listens_on_the_node_address_only(ray_cluster, run_config, figure):
    """torch's TCPStore (MASTER_PORT) listens on every interface whatever MASTER_ADDR says, unless
    handed a bound socket: on the embedded cluster nothing a TorchTrainer run opens is beyond loopback."""
    pytest.importorskip("torch")
    from trainkit_torch import TorchTrainer

    result = TorchTrainer(_listeners_of_this_process, run_config=run_config(),
                          scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})).fit()
    metrics = result.metrics  # rank 0's report
    listeners = [line.split() for line in metrics["listeners"]]
    store = [ip for ip, port in listeners if int(port) == metrics["master_port"]]
    outside = [ip for ip, _ in listeners if ip not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")]
    figure("S6", f"TorchTrainer rank 0: TCPStore on MASTER_PORT bound to {store}; {len(listeners)} listeners, "
                 f"beyond loopback: {len(outside)}")
    assert store == ["127.0.0.1"] and not outside, listeners


def test_s6_embedded_cluster_files_are_private(ray_cluster, figure):
    """Ray makes its session directories 0777 without the sticky bit and writes its auth token 0644:
    the embedded cluster's sit under a 0700 directory of this user's, and the token is 0600."""
    import stat
    from pathlib import Path

    from ray._private.authentication.authentication_token_setup import _get_default_token_path

    session = Path(ray_cluster._private.worker._global_node.get_session_dir_path())
    guard = next(p for p in session.parents if p.name == f"trainkit-{os.getuid()}")
    token = _get_default_token_path()
    modes = {"guard": stat.S_IMODE(guard.stat().st_mode), "token": stat.S_IMODE(token.stat().st_mode)}
    figure("S6", f"embedded Ray session under {guard} (mode {modes['guard']:o}); auth token mode {modes['token']:o}")
    assert modes == {"guard": 0o700, "token": 0o600} and guard.stat().st_uid == os.getuid()
