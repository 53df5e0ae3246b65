# trainkit's own fixtures (ray_cluster, run_config, processes) for every test directory of this repository.
import importlib.metadata
import os
import sys

pytest_plugins = ["trainkit.testing", "pytester"]

# DeepSpeed JIT-builds its C++ ops on first use (shm_comm ~40 s, cpu_adam ~65 s; 5 min on a busy
# machine) into torch's extensions directory and reuses them, but keys them by op name only: ops built
# by another DeepSpeed version load and then fail (e.g. "module 'deepspeed_shm_comm' has no attribute
# 'vector_kernel_level'"). So each DeepSpeed version gets its own directory, set here for every
# session (trainkit-hf's tests, the examples, the docs pages, whose HOME is a temporary directory):
# one CI run builds the op once. Workers and subprocesses inherit it from this process.
try:
    _DEEPSPEED = importlib.metadata.version("deepspeed")
except importlib.metadata.PackageNotFoundError:
    _DEEPSPEED = None
if _DEEPSPEED and "TORCH_EXTENSIONS_DIR" not in os.environ:
    os.environ["TORCH_EXTENSIONS_DIR"] = os.path.expanduser(f"~/.cache/torch_extensions/deepspeed-{_DEEPSPEED}")

# the op every deepspeed.initialize builds on CPUs (the tests' offload steps torch's Adam: no cpu_adam)
_BUILD_OPS = ("from deepspeed.accelerator import get_accelerator\n"
              "get_accelerator().create_op_builder('ShareMemCommBuilder').load()\n")


def pytest_collection_finish(session):
    """Build DeepSpeed's op before the first test that uses DeepSpeed (nothing when it is built):
    inside a test it is built under its timeout, by a worker, while the other rank waits."""
    if _DEEPSPEED and any("deepspeed" in item.nodeid or "huggingface.md" in item.nodeid for item in session.items):
        from trainkit.testing import subprocesses

        subprocesses.run([sys.executable, "-c", _BUILD_OPS], check=True, timeout=1800)


def pytest_configure(config):
    config.addinivalue_line("markers", "ray_patches: checks what a patch of Ray's internals does (skipped, saying so, "
                                       "where TRAINKIT_RAY_PATCHES=0 turns them off: nox -s core_unpatched)")


def pytest_runtest_setup(item):
    import pytest

    if item.get_closest_marker("ray_patches") and os.environ.get("TRAINKIT_RAY_PATCHES", "1") == "0":
        pytest.skip("checks a patch of Ray's internals, and TRAINKIT_RAY_PATCHES=0 turns them off")
