# trainkit's own fixtures (ray_cluster, run_config, processes) for every test directory of this repository.
import importlib.metadata
import os
import sys
import time

import pytest

pytest_plugins = ["trainkit.testing", "pytester"]

# DeepSpeed JIT-builds its C++ ops on first use (shm_comm ~40 s, cpu_adam ~65 s; 5 min on a busy
# machine) into torch's extensions directory and reuses them, but keys them by op name only: ops built
# by another DeepSpeed version load and then fail (e.g. "module 'deepspeed_shm_comm' has no attribute
# 'vector_kernel_level'"). So each DeepSpeed version gets its own directory, set here for every
# session (trainkit-hf's tests, the examples, the docs pages, whose HOME is a temporary directory):
# one CI run builds each op once. Workers and subprocesses inherit it from this process.
try:
    _DEEPSPEED = importlib.metadata.version("deepspeed")
except importlib.metadata.PackageNotFoundError:
    _DEEPSPEED = None
if _DEEPSPEED and "TORCH_EXTENSIONS_DIR" not in os.environ:
    os.environ["TORCH_EXTENSIONS_DIR"] = os.path.expanduser(f"~/.cache/torch_extensions/deepspeed-{_DEEPSPEED}")

# the ops a CPU run builds: shm_comm for every deepspeed.initialize, cpu_adam for optimizer offload
_BUILD_OPS = ("from deepspeed.accelerator import get_accelerator\n"
              "for name in ('ShareMemCommBuilder', 'CPUAdamBuilder'):\n"
              "    get_accelerator().create_op_builder(name).load()\n")


def pytest_collection_finish(session):
    """Build DeepSpeed's ops before the first test that uses DeepSpeed (nothing when they are built):
    inside a test they are built under its timeout, by a worker, while the other rank waits."""
    if _DEEPSPEED and any("deepspeed" in item.nodeid or "huggingface.md" in item.nodeid for item in session.items):
        from trainkit.testing import subprocesses

        subprocesses.run([sys.executable, "-c", _BUILD_OPS], check=True, timeout=1800)


# The CPU each test costs, beside --durations' wall time: under load a test slows by its CPU, not by
# its waits (timeouts, sleeps). This process tree's: CI runs other sessions beside this one.
def _tree_cpu_s() -> float:
    """CPU-seconds of this process, its descendants and the descendants they reaped."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


_CPU_PER_TEST: list[tuple[float, float, str]] = []  # (CPU-s, wall s, test)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    began, cpu = time.monotonic(), _tree_cpu_s()
    yield
    _CPU_PER_TEST.append((_tree_cpu_s() - cpu, time.monotonic() - began, item.nodeid))


def pytest_terminal_summary(terminalreporter):
    if not _CPU_PER_TEST:
        return
    total = sum(cpu for cpu, _, _ in _CPU_PER_TEST)
    terminalreporter.write_sep("=", f"most CPU: the CPU-s of the test process and its descendants per test ({total:.0f} in all)")
    for cpu, wall, test in sorted(_CPU_PER_TEST, reverse=True)[:10]:
        terminalreporter.write_line(f"{cpu:7.1f} CPU-s {wall:7.1f} s  {test}")
