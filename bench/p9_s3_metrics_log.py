"""P9: the driver's metrics log on S3 (a SeaweedFS server on loopback): reports/s over the first and
the last 200 of N reports. Flat means a report's cost does not grow with the run's length.

    python bench/p9_s3_metrics_log.py --reports 3000
"""

import argparse
import tempfile
import time
from pathlib import Path

from _common import save
from trainkit._internal.storage.metrics_log import MetricsLog, read_metrics_log
from trainkit._internal.storage.run_storage import RunStorage
from trainkit.testing.s3 import SeaweedFS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=3000)
    args = parser.parse_args()
    server = SeaweedFS(Path(tempfile.mkdtemp(prefix="p9-weed-")))
    server.start()
    try:
        storage = RunStorage(server.settings()["uri"], "p9")
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
        server.stop()


if __name__ == "__main__":
    main()
