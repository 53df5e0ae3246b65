"""P4: report() with a 256 MiB checkpoint on a worker: sync vs a plain copy of the same files on the
same disk, and how soon an ASYNC report() returns.

    python bench/p4_checkpoint_report.py [--mib 256] [--repeats 5]

Target (TARGETS.md): sync <= 1.3x the plain copy; async returns in <= 20 ms.
"""

from __future__ import annotations

import argparse
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
    import trainkit

    scratch = tempfile.mkdtemp(prefix="p4-", dir=config["disk"])
    src = os.path.join(scratch, "src")
    os.makedirs(src)
    with open(os.path.join(src, "model.bin"), "wb") as f:
        for _ in range(config["mib"] // 16):
            f.write(os.urandom(16 << 20))
    copy_s, sync_s, async_s = [], [], []
    for i in range(config["repeats"]):
        dst = os.path.join(scratch, f"copy{i}")
        start = time.perf_counter()
        shutil.copytree(src, dst)
        copy_s.append(time.perf_counter() - start)
        shutil.rmtree(dst)
        start = time.perf_counter()
        trainkit.report({"i": i}, checkpoint=trainkit.Checkpoint.from_directory(src))
        sync_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        trainkit.report({"i": i}, checkpoint=trainkit.Checkpoint.from_directory(src),
                        checkpoint_upload_mode=trainkit.CheckpointUploadMode.ASYNC,
                        delete_local_checkpoint_after_upload=False)
        async_s.append(time.perf_counter() - start)
        trainkit.get_all_reported_checkpoints()  # let the upload finish before the next round
    shutil.rmtree(scratch)
    return {"copy_s": copy_s, "sync_s": sync_s, "async_s": async_s}


def main() -> None:
    import trainkit

    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    storage = tempfile.mkdtemp(prefix="p4-storage-")
    result = trainkit.DataParallelTrainer(
        measure, train_loop_config={"mib": args.mib, "repeats": args.repeats, "disk": os.path.dirname(storage)},
        scaling_config=trainkit.ScalingConfig(num_workers=1),
        run_config=trainkit.RunConfig(name="p4", storage_path=storage, verbose=0,
                                      checkpoint_config=trainkit.CheckpointConfig(num_to_keep=1))).fit()
    shutil.rmtree(storage, ignore_errors=True)
    r = result.return_value
    copy, sync, asyn = (statistics.median(r[k]) for k in ("copy_s", "sync_s", "async_s"))
    print(f"P4 plain copy of {args.mib} MiB: median {copy * 1e3:.0f} ms (min {min(r['copy_s']) * 1e3:.0f}, max {max(r['copy_s']) * 1e3:.0f})")
    print(f"P4 report() SYNC: median {sync * 1e3:.0f} ms (min {min(r['sync_s']) * 1e3:.0f}, max {max(r['sync_s']) * 1e3:.0f})")
    print(f"P4 sync/copy = {sync / copy:.2f} (target <= 1.3)")
    print(f"P4 report() ASYNC returns in {asyn * 1e3:.1f} ms median, max {max(r['async_s']) * 1e3:.1f} (target <= 20)")
    print(f"results: {save('p4', {'mib': args.mib, **r, 'sync_over_copy': sync / copy})}")


if __name__ == "__main__":
    main()
