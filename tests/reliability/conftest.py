"""Reliability and security suite (TARGETS.md R1-R10, S1-S6): real workers, real SIGKILL/SIGSTOP,
a real S3-compatible server. Each test records its figure; the summary prints them all and writes
reliability_report.json."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainkit.testing.s3 import SeaweedFS


FIGURES: list[dict] = []
REPORT = Path(__file__).parent / "reliability_report.json"


@pytest.fixture
def figure(request):
    def record(target: str, text: str, **values):
        FIGURES.append({"target": target, "test": request.node.name, "figure": text, **values})
        print(f"{target}: {text}")
    return record


def pytest_terminal_summary(terminalreporter):
    if not FIGURES:
        return
    terminalreporter.section("reliability figures")
    for f in sorted(FIGURES, key=lambda f: f["target"]):
        terminalreporter.write_line(f"{f['target']:4s} {f['figure']}")
    REPORT.write_text(json.dumps(FIGURES, indent=1))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A SeaweedFS S3 server on loopback with one bucket; yields its connection settings."""
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    yield server.settings()
    server.stop()


@pytest.fixture
def own_s3_server(tmp_path_factory):
    """A SeaweedFS server of this test's own, to stop and start again."""
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs-own"))
    server.start()
    yield server
    if server.proc.poll() is None:
        server.stop()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real 2 MiB filesystem (tmpfs; needs root), to fill up."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


DRIVER = Path(__file__).parent / "_driver.py"


@pytest.fixture
def run_driver(processes):
    def run(storage: str, name: str, steps: int, env: dict | None = None, wait: bool = True, **options):
        """Run tests/reliability/_driver.py in a fresh process (a driver that can be killed), ended
        with its Ray session when the test ends."""
        args = [sys.executable, str(DRIVER), storage, name, str(steps), json.dumps(options)]
        full_env = {**os.environ, "TRAINKIT_VERBOSE": "0", **(env or {})}
        if not wait:
            return processes.start(args, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return processes.run(args, env=full_env, capture_output=True, text=True, timeout=600)

    return run


@pytest.fixture
def check_run_dir():
    return _check_run_dir


def _check_run_dir(run_path: str) -> dict:
    """Invariants after a run: no temporary dirs, every checkpoint verifies against its manifest, the
    state names exactly the checkpoint dirs on disk, metrics indices strictly increase."""
    import trainkit

    entries = sorted(os.listdir(run_path))
    assert not [e for e in entries if e.startswith(".tmp-")], entries
    state = json.load(open(os.path.join(run_path, "run_state.json")))
    on_disk = {e for e in entries if e.startswith("checkpoint_")}
    assert on_disk == {c["name"] for c in state["checkpoints"]}, (on_disk, state["checkpoints"])
    for name in on_disk:
        trainkit.Checkpoint(os.path.join(run_path, name)).verify()
    indices = [json.loads(line)["index"] for line in open(os.path.join(run_path, "metrics.jsonl"))]
    assert indices == sorted(set(indices)), indices
    return state
