"""DeepSpeed JIT-builds its C++ ops once (~40 s, cpu_adam ~65 s) into torch's extensions directory
and reuses them, but keys them by op name only: ops built by another DeepSpeed version load and then
fail (e.g. "module 'deepspeed_shm_comm' has no attribute 'vector_kernel_level'"). So each DeepSpeed
version gets its own directory, shared by every test and worker (workers inherit it from the driver
that starts Ray)."""

import importlib.metadata
import os

try:
    _version = importlib.metadata.version("deepspeed")
except importlib.metadata.PackageNotFoundError:
    _version = None
if _version and "TORCH_EXTENSIONS_DIR" not in os.environ:
    os.environ["TORCH_EXTENSIONS_DIR"] = os.path.expanduser(f"~/.cache/torch_extensions/deepspeed-{_version}")
