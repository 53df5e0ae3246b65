# trainkit's own fixtures (ray_cluster, run_config, processes) for every test directory of this repository.
import importlib.metadata
import os

pytest_plugins = ["trainkit.testing", "pytester"]

# DeepSpeed JIT-builds its C++ ops once (~40 s, cpu_adam ~65 s; minutes on a busy machine) into torch's
# extensions directory and reuses them, but keys them by op name only: ops built by another DeepSpeed
# version load and then fail (e.g. "module 'deepspeed_shm_comm' has no attribute
# 'vector_kernel_level'"). So each DeepSpeed version gets its own directory, set here for every
# session (trainkit-hf's tests, the examples, the docs pages, whose HOME is a temporary directory):
# one CI run builds each op once. Workers and subprocesses inherit it from this process.
try:
    _deepspeed = importlib.metadata.version("deepspeed")
except importlib.metadata.PackageNotFoundError:
    _deepspeed = None
if _deepspeed and "TORCH_EXTENSIONS_DIR" not in os.environ:
    os.environ["TORCH_EXTENSIONS_DIR"] = os.path.expanduser(f"~/.cache/torch_extensions/deepspeed-{_deepspeed}")
