"""How many GPUs this process may use, without importing a framework."""

from __future__ import annotations

import os
import shutil
import subprocess


def gpu_count() -> int:
    """GPUs this process may use: ``nvidia-smi -L``, narrowed by ``CUDA_VISIBLE_DEVICES``."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    count = sum(line.startswith("GPU ") for line in listed.splitlines())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip()]))
    return count
