"""P4-S3: report() SYNC with a 256 MiB checkpoint to an S3 server (SeaweedFS on loopback) vs a plain
multipart copy of the same files with the same client (pyarrow's S3FileSystem, ``pyarrow.fs.copy_files``),
alternating each round; also the time until the checkpoint is committed, and boto3's upload_file.

    python bench/p4_s3_checkpoint_report.py [--mib 256] [--repeats 3]

Target (issue 23): report() SYNC <= 1.3x the plain copy.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import save  # noqa: E402


def measure(config):
    import pyarrow.fs as pafs

    import trainkit

    storage = trainkit.get_context().get_storage()
    src = os.path.join(config["scratch"], "src")
    samples = {"copy_s": [], "sync_s": [], "committed_s": [], "boto3_s": []}
    for i in range(config["repeats"]):
        plain = storage.path("plain")
        start = time.perf_counter()
        pafs.copy_files(src, plain, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=storage.fs)
        samples["copy_s"].append(time.perf_counter() - start)
        storage.fs.delete_dir(plain)
        start = time.perf_counter()
        trainkit.report({"i": i}, checkpoint=trainkit.Checkpoint.from_directory(src))
        samples["sync_s"].append(time.perf_counter() - start)
        manifest = storage.path(f"checkpoint_{i:06d}", ".manifest.json")  # written last, by the commit
        while storage.fs.get_file_info(manifest).type == pafs.FileType.NotFound:
            time.sleep(0.005)
        samples["committed_s"].append(time.perf_counter() - start)
        if config.get("boto3"):
            start = time.perf_counter()
            _boto3_upload(config["boto3"], src)
            samples["boto3_s"].append(time.perf_counter() - start)
    return samples


def _boto3_upload(settings: dict, src: str) -> None:
    import boto3
    from boto3.s3.transfer import TransferConfig

    client = boto3.client("s3", endpoint_url=f"http://{settings['endpoint']}", region_name="us-east-1",
                          aws_access_key_id=settings["access_key"], aws_secret_access_key=settings["secret_key"])
    for name in os.listdir(src):
        client.upload_file(os.path.join(src, name), "bucket", f"boto3/{name}", Config=TransferConfig())
        client.delete_object(Bucket="bucket", Key=f"boto3/{name}")


def main() -> None:
    import trainkit
    from trainkit.testing.s3 import SeaweedFS

    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="p4s3-")  # the server's data and the source on one disk
    os.makedirs(os.path.join(scratch, "src"))
    with open(os.path.join(scratch, "src", "model.bin"), "wb") as f:
        for _ in range(args.mib // 16):
            f.write(os.urandom(16 << 20))
    os.makedirs(os.path.join(scratch, "weed"))
    server = SeaweedFS(Path(scratch, "weed"))
    server.start()
    try:
        settings = server.settings()
        boto = {k: settings[k] for k in ("endpoint", "access_key", "secret_key")} \
            if importlib.util.find_spec("boto3") else None
        result = trainkit.DataParallelTrainer(
            measure, train_loop_config={"repeats": args.repeats, "scratch": scratch, "boto3": boto},
            scaling_config=trainkit.ScalingConfig(num_workers=1),
            run_config=trainkit.RunConfig(name="p4s3", storage_path=settings["uri"], verbose=0,
                                          checkpoint_config=trainkit.CheckpointConfig(num_to_keep=1))).fit()
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    r = result.return_value
    med = {k: statistics.median(v) for k, v in r.items() if v}
    span = lambda k: f"median {med[k] * 1e3:.0f} ms (min {min(r[k]) * 1e3:.0f}, max {max(r[k]) * 1e3:.0f})"  # noqa: E731
    print(f"P4-S3 plain multipart copy of {args.mib} MiB (pyarrow copy_files): {span('copy_s')}")
    print(f"P4-S3 report() SYNC: {span('sync_s')}")
    print(f"P4-S3 report() until committed: {span('committed_s')}")
    if "boto3_s" in med:
        print(f"P4-S3 boto3 upload_file (TransferConfig defaults): {span('boto3_s')}")
    print(f"P4-S3 sync/copy = {med['sync_s'] / med['copy_s']:.2f} (target <= 1.3); "
          f"committed/copy = {med['committed_s'] / med['copy_s']:.2f}")
    print(f"results: {save('p4_s3', {'mib': args.mib, **r, 'sync_over_copy': med['sync_s'] / med['copy_s']})}")


if __name__ == "__main__":
    main()
