"""bench/gpu_check.sh stops at once, before installing anything, where there is no GPU."""

import os
import shutil
from pathlib import Path

import pytest

from trainkit.testing import subprocesses

SCRIPT = Path(__file__).parents[1] / "bench" / "gpu_check.sh"


def run_without_gpu(tmp_path, nvidia_smi: str | None):
    """The script with a PATH holding only what it needs to get started, plus ``nvidia-smi`` as given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "grep", "timeout", "python3"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    if nvidia_smi is not None:
        (bin_dir / "nvidia-smi").write_text(nvidia_smi)
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": str(bin_dir), "VENV": str(tmp_path / "venv"), "HOME": str(tmp_path)}
    done = subprocesses.run([shutil.which("bash"), str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert not (tmp_path / "venv").exists()  # failed before creating the environment
    return done


def test_fails_early_without_nvidia_smi(tmp_path):
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    done = run_without_gpu(tmp_path, nvidia_smi=None)
    assert done.returncode == 2
    assert "FAIL gpu: nvidia-smi not found" in done.stderr


def test_fails_early_when_nvidia_smi_lists_no_gpu(tmp_path):
    # the driver tool present, no device (what nvidia-smi prints in a container without one)
    done = run_without_gpu(tmp_path, "#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    assert done.returncode == 2
    assert "FAIL gpu: nvidia-smi lists no GPU: No devices were found" in done.stderr
