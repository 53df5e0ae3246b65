"""The embedded cluster with trainkit's patches of Ray internals turned off (TRAINKIT_RAY_PATCHES=0)."""

import os
import subprocess
import sys

SCRIPT = """
import ray, trainkit
from trainkit import DataParallelTrainer, RunConfig, ScalingConfig

def fn():
    trainkit.report({"world": trainkit.get_context().get_world_size()})

result = DataParallelTrainer(fn, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
                             run_config=RunConfig(name="unpatched", storage_path=%r, verbose=0)).fit()
node = ray._private.worker._global_node
patched = [name for name, f in [("print_to_stdstream", ray._private.worker.print_to_stdstream),
                                ("Node.__init__", ray._private.node.Node.__init__)]
           if getattr(f, "trainkit_filtered", False) or f.__module__.startswith("trainkit")]
print(result.metrics["world"], node.get_session_dir_path().startswith(%r), patched)
"""


def test_ray_patches_switch_off_and_runs_still_work(tmp_path):
    from trainkit._internal.ray_runtime import private_dir

    env = {**os.environ, "TRAINKIT_RAY_PATCHES": "0"}
    out = subprocess.run([sys.executable, "-c", SCRIPT % (str(tmp_path), str(private_dir()))], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-2] == "2 True []", out.stdout


def test_use_gpu_without_a_gpu_fails_at_once_saying_so(ray_cluster, run_config):
    import time

    import pytest

    import trainkit
    from trainkit import DataParallelTrainer, ScalingConfig

    if ray_cluster.cluster_resources().get("GPU"):
        pytest.skip("this machine has a GPU")
    begin = time.monotonic()
    with pytest.raises(ValueError, match=r"GPU=1 \(the machine has 0\).*use_gpu=True needs a GPU"):
        DataParallelTrainer(lambda: trainkit.report({"x": 1}), scaling_config=ScalingConfig(num_workers=2, use_gpu=True),
                            run_config=run_config()).fit()
    assert time.monotonic() - begin < 10  # not the 60 s placement timeout


BACKGROUND = """
import sys, threading, time
import trainkit
from trainkit import DataParallelTrainer, RunConfig, ScalingConfig

assert "ray" not in sys.modules, "importing trainkit imported Ray"
local = DataParallelTrainer(lambda: trainkit.report({"x": 1}), scaling_config=ScalingConfig(num_workers=0),
                            run_config=RunConfig(name="local", storage_path=%(storage)r, verbose=0)).fit()
assert local.metrics == {"x": 1}
assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized(), "local mode started Ray"
assert not [t for t in threading.enumerate() if t.name == "trainkit-ray-start"]
try:
    DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name="r", storage_path=%(bad_storage)r, verbose=0)).fit()
except Exception as exc:
    print("fit failed:", type(exc).__name__, exc, flush=True)
print("exiting", time.time(), flush=True)
"""


def _ray_processes(tmpdir) -> list[str]:
    """Processes of an embedded cluster under ``tmpdir`` (their command lines name its session dir)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(tmpdir) in cmdline and "pytest" not in cmdline:
            found.append(cmdline[:120])
    return found


def test_background_start_stops_at_exit_when_fit_never_claims_it(tmp_path):
    """fit() starts Ray on a thread once its inputs are checked; a run that fails before it waits for
    Ray (here: a storage path that is a file) leaves no Ray process behind when the script exits.
    Importing trainkit or a local run (num_workers=0) starts no Ray at all."""
    import time

    tmpdir, bad_storage = tmp_path / "tmp", tmp_path / "not-a-dir"
    tmpdir.mkdir()
    bad_storage.write_text("a file")
    script = BACKGROUND % {"storage": str(tmp_path / "runs"), "bad_storage": str(bad_storage)}
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(tmpdir)},
                         capture_output=True, text=True, timeout=120)
    ended = time.time()
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fit failed:" in out.stdout and str(bad_storage) in out.stdout, out.stdout
    assert (tmpdir / f"trainkit-{os.getuid()}" / "ray").is_dir(), "the background start never ran"
    exiting = float(out.stdout.rsplit("exiting ", 1)[1])
    print(f"exit took {ended - exiting:.2f} s")
    deadline = time.monotonic() + 5
    while _ray_processes(tmpdir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _ray_processes(tmpdir)


ERROR = """
import trainkit
from trainkit import DataParallelTrainer, RunConfig, ScalingConfig
try:
    DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=2),
                        run_config=RunConfig(name="r", storage_path=%r, verbose=0)).fit()
except PermissionError as exc:
    print("fit raised:", exc)
"""


def test_background_start_error_is_raised_by_fit(tmp_path):
    """Ray's start fails on the background thread (trainkit's private dir is taken by a file): fit()
    raises that error, with its message, in the caller's thread."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    (tmpdir / f"trainkit-{os.getuid()}").symlink_to(tmp_path)
    out = subprocess.run([sys.executable, "-c", ERROR % str(tmp_path / "runs")], env={**os.environ, "TMPDIR": str(tmpdir)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fit raised:" in out.stdout and "is not a directory of this user's" in out.stdout, out.stdout
