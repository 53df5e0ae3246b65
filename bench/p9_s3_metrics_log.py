"""P9: the driver's metrics log on S3 (a SeaweedFS server on loopback): reports/s over the first and
the last 200 of N reports. Flat means a report's cost does not grow with the run's length.

    python bench/p9_s3_metrics_log.py --reports 3000
"""

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import save

from trainkit._internal.metrics_log import MetricsLog, read_metrics_log
from trainkit._internal.storage import RunStorage


def free_port_pair() -> int:
    """A port p with p + 10000 free too (SeaweedFS's gRPC port)."""
    while True:
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=3000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="p9-weed-"))
    (root / "s3.json").write_text(json.dumps({"identities": [{"name": "b", "credentials": [
        {"accessKey": "bench", "secretKey": "bench"}], "actions": ["Admin", "Read", "Write", "List"]}]}))
    ports = [free_port_pair() for _ in range(4)]
    weed = subprocess.Popen(
        [str(Path(sys.executable).parent / "weed"), "server", f"-dir={root}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
         f"-master.port={ports[0]}", f"-volume.port={ports[1]}", f"-filer.port={ports[2]}", "-s3",
         f"-s3.port={ports[3]}", f"-s3.config={root / 's3.json'}", "-volume.max=10", "-metricsPort=0"],
        stdout=open(root / "weed.log", "wb"), stderr=subprocess.STDOUT)
    try:
        uri = f"s3://bench:bench@bucket/runs?endpoint_override=127.0.0.1:{ports[3]}&scheme=http&region=us-east-1"
        import pyarrow.fs as pafs

        fs, _ = pafs.FileSystem.from_uri(uri)
        for _ in range(200):
            try:
                pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{ports[3]}", scheme="http", access_key="bench",
                                  secret_key="bench", region="us-east-1", allow_bucket_creation=True).create_dir("bucket")
                break
            except OSError:
                time.sleep(0.3)
        storage = RunStorage(uri, "p9")
        storage.preflight()
        log, stamps = MetricsLog(storage), []
        metrics = {"loss": 0.123456, "accuracy": 0.98765, "lr": 1e-4, "epoch": 3}
        for i in range(args.reports):
            log.append({"index": i, "attempt": 0, "time": time.time(), "checkpoint": None, "metrics": metrics})
            stamps.append(time.perf_counter())
        first = 199 / (stamps[199] - stamps[0])
        last = 199 / (stamps[-1] - stamps[-200])
        assert len(read_metrics_log(storage.fs, storage.run_path)) == args.reports
        print(f"P9 S3 metrics log: {first:.0f} reports/s over reports 1-200, {last:.0f} reports/s over the last "
              f"200 of {args.reports} ({last / first:.2f}x)")
        save("p9_s3_metrics_log", {"reports": args.reports, "first_200_per_s": first, "last_200_per_s": last})
    finally:
        weed.kill()
        weed.wait()


if __name__ == "__main__":
    main()
