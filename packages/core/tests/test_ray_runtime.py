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
