"""P2-S3: reports/s a run on S3 (SeaweedFS on loopback) takes in, over 10,000 reports of 2 workers
(metrics only, as fast as they can), first and last 1,000; against the plain client's rate for the
least a report needs there, one small PUT (pyarrow's S3FileSystem, the client trainkit uses), in the
same run.

    python bench/p2_s3_report_throughput.py [--reports 10000] [--puts 1000]

Target (issue 23): flat over the run (last 1,000 / first 1,000 >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import save  # noqa: E402


def loop(config):
    import trainkit

    for i in range(config["reports"]):
        trainkit.report({"step": i, "loss": 1.0 / (i + 1), "lr": 1e-4, "epoch": i // 1000})


def plain_puts(fs, prefix: str, n: int) -> float:
    """PUTs per second of one report-sized object each (a metrics line)."""
    line = json.dumps({"index": 0, "attempt": 0, "time": time.time(), "checkpoint": None,
                       "metrics": {"step": 0, "loss": 1.0, "lr": 1e-4, "epoch": 0}}).encode() + b"\n"
    start = time.perf_counter()
    for i in range(n):
        with fs.open_output_stream(f"{prefix}/{i:06d}") as f:
            f.write(line)
    return n / (time.perf_counter() - start)


def main() -> None:
    import trainkit
    from trainkit._internal.storage.metrics_log import read_metrics_log
    from trainkit.testing.s3 import SeaweedFS

    parser = argparse.ArgumentParser()
    parser.add_argument("--reports", type=int, default=10_000)
    parser.add_argument("--puts", type=int, default=1000)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="p2s3-"))
    server = SeaweedFS(scratch)
    server.start()
    try:
        settings = server.settings()
        put_rate = plain_puts(settings["fs"], "bucket/plain", args.puts)
        start = time.perf_counter()
        result = trainkit.DataParallelTrainer(
            loop, train_loop_config={"reports": args.reports},
            scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
            run_config=trainkit.RunConfig(name="p2s3", storage_path=settings["uri"], verbose=0)).fit()
        fit_s = time.perf_counter() - start
        log = read_metrics_log(settings["fs"], result.path)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    assert [r["index"] for r in log] == list(range(args.reports)), "reports missing from the log"
    stamps, window = [r["time"] for r in log], min(1000, args.reports // 2)
    first = (window - 1) / (stamps[window - 1] - stamps[0])
    last = (window - 1) / (stamps[-1] - stamps[-window])
    overall = (args.reports - 1) / (stamps[-1] - stamps[0])
    print(f"P2-S3 plain client: {put_rate:.0f} PUTs/s of one metrics line each (n={args.puts})")
    print(f"P2-S3 trainkit on S3: {first:.0f} reports/s over the first {window}, {last:.0f} over the last {window} "
          f"of {args.reports}, {overall:.0f} overall ({fit_s:.1f} s fit)")
    print(f"P2-S3 last/first = {last / first:.2f} (target >= 0.9, flat); trainkit/plain PUTs = {overall / put_rate:.2f}")
    print(f"results: {save('p2_s3', {'reports': args.reports, 'plain_puts_per_s': put_rate, 'first_per_s': first, 'last_per_s': last, 'overall_per_s': overall, 'fit_s': fit_s})}")


if __name__ == "__main__":
    main()
