"""P14: memory of a big checkpoint's round trip, per checkpoint size, on S3 (SeaweedFS on loopback,
data on the same disk) and on the local disk: how far the rank's peak RSS rises over ``report()``
(SYNC), the driver's over the report and its commit, and the restoring process's over
``Checkpoint.as_directory()`` (a download from S3; on the local disk the files are used in place);
with report()'s time and, on S3, a plain multipart copy of the same
files with the same client (``pyarrow.fs.copy_files``) for reference. Each checkpoint is 3 files.

    python bench/p14_checkpoint_memory.py [--mib 64 512 1536] [--stores s3 local]

Peaks are the kernel's high-water marks (VmHWM), reset just before each step through
``/proc/<pid>/clear_refs`` (Linux), less the RSS at that moment. Run it against an older checkout
with ``PYTHONPATH`` for the before.

Target (issue 44 item 4): the growth is a small constant (a few upload parts), whatever the size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import save  # noqa: E402

FILES = 3


def _status_mib(pid: int | str, key: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":")) / 1024


def _reset_peak(pid: int | str) -> float:
    """Reset ``pid``'s VmHWM; its RSS now, in MiB."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
    return _status_mib(pid, "VmRSS")


def measure(config):
    import pyarrow.fs as pafs

    import trainkit

    storage = trainkit.get_context().get_storage()
    src = tempfile.mkdtemp(dir=config["scratch"])
    block = os.urandom(16 << 20)
    for i in range(FILES):
        with open(os.path.join(src, f"shard-{i}.bin"), "wb") as f:
            for _ in range(config["mib"] // FILES // 16):
                f.write(block)
    del block
    out = {}
    driver, rank = _reset_peak(config["driver"]), _reset_peak("self")
    start = time.perf_counter()
    trainkit.report({"step": 0}, checkpoint=trainkit.Checkpoint.from_directory(src))
    out["report_s"] = time.perf_counter() - start
    out["rank_mib"] = _status_mib("self", "VmHWM") - rank
    manifest = storage.path("checkpoint_000000", ".manifest.json")  # written last, by the commit
    while storage.fs.get_file_info(manifest).type == pafs.FileType.NotFound:
        time.sleep(0.005)
    out["committed_s"] = time.perf_counter() - start
    out["driver_mib"] = _status_mib(config["driver"], "VmHWM") - driver
    if config["copy"]:  # the plain client's upload, for reference, after report(): what it leaves
        # allocated would hide report()'s growth
        plain = storage.path("plain")
        before = _reset_peak("self")
        start = time.perf_counter()
        pafs.copy_files(src, plain, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=storage.fs)
        out["copy_s"] = time.perf_counter() - start
        out["copy_rank_mib"] = _status_mib("self", "VmHWM") - before
        storage.fs.delete_dir(plain)
    shutil.rmtree(src)
    return out


def one(store: str, mib: int, scratch: str, uri: str) -> dict:
    import trainkit

    result = trainkit.DataParallelTrainer(
        measure, train_loop_config={"mib": mib, "scratch": scratch, "driver": os.getpid(), "copy": store == "s3"},
        scaling_config=trainkit.ScalingConfig(num_workers=1),
        run_config=trainkit.RunConfig(name=f"p14-{store}-{mib}", storage_path=uri, verbose=0)).fit()
    out = {"store": store, "mib": mib, **result.return_value}
    before = _reset_peak("self")
    start = time.perf_counter()
    with result.checkpoint.as_directory():
        out["restore_s"] = time.perf_counter() - start
        out["restore_mib"] = _status_mib("self", "VmHWM") - before
    result.checkpoint.filesystem.delete_dir(result.checkpoint.path)
    return out


def main() -> None:
    os.environ.setdefault("TRAINKIT_SPARE_WORKERS", "0")  # a fresh rank per size: none inherits another's heap
    from trainkit.testing.s3 import SeaweedFS

    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, nargs="+", default=[64, 512, 1536])
    parser.add_argument("--stores", nargs="+", default=["s3", "local"], choices=["s3", "local"])
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="p14-")  # the server's data, the local store and the sources on one disk
    server = None
    rows = []
    try:
        if "s3" in args.stores:
            os.makedirs(os.path.join(scratch, "weed"))
            server = SeaweedFS(Path(scratch, "weed"))
            server.start()
        for mib in args.mib:
            for store in args.stores:
                uri = server.settings()["uri"] if store == "s3" else os.path.join(scratch, "local")
                row = one(store, mib, scratch, uri)
                rows.append(row)
                copy = (f"; plain copy_files {row['copy_s']:.2f} s, rank {row['copy_rank_mib']:+.0f} MiB, "
                        f"report/copy = {row['report_s'] / row['copy_s']:.2f}") if "copy_s" in row else ""
                print(f"P14 {store:5s} {mib:5d} MiB ({FILES} files): rank {row['rank_mib']:+.0f} MiB over report() "
                      f"({row['report_s']:.2f} s, {mib / row['report_s']:.0f} MiB/s), "
                      f"driver {row['driver_mib']:+.0f} MiB to the commit ({row['committed_s']:.2f} s), restore {row['restore_mib']:+.0f} MiB "
                      f"({row['restore_s']:.2f} s){copy}", flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    for store in args.stores:
        mine = [r for r in rows if r["store"] == store]
        if len(mine) > 1:
            print(f"P14 {store}: rank growth {mine[0]['rank_mib']:.0f} MiB at {mine[0]['mib']} MiB, "
                  f"{mine[-1]['rank_mib']:.0f} MiB at {mine[-1]['mib']} MiB "
                  f"({mine[-1]['mib'] // mine[0]['mib']}x the data); "
                  f"largest/data = {mine[-1]['rank_mib'] / mine[-1]['mib']:.3f}")
    print(f"results: {save('p14', {'files': FILES, 'rows': rows})}")


if __name__ == "__main__":
    main()
