"""Worker output: every rank's lines kept per attempt in the run directory, a tqdm bar shown as its
finished line (not a line per refresh), nothing doubled when the user's script called ray.init()."""

import sys
import textwrap

from trainkit.testing import subprocesses

DRIVER = textwrap.dedent('''
    import os, sys, time
    import ray
    import trainkit

    ray.init(num_cpus=2)  # the user's own ray.init(): Ray forwards worker streams to this driver

    def train_fn(config):
        from tqdm import tqdm

        ctx = trainkit.get_context()
        print(f"hello from rank {ctx.get_world_rank()} attempt {ctx.get_attempt()}")
        for _ in tqdm(range(30), desc="epoch", mininterval=0, miniters=1):
            time.sleep(0.005)
        if ctx.get_attempt() == 0 and ctx.get_world_rank() == 1:
            # not before the driver has rank 0's finished bar (its log line is written, then shown):
            # the failure ends the attempt, and would cut rank 0's bar short on a busy machine
            rank0 = os.path.join(config["run"], "logs", "attempt_0", "rank_0.txt")
            while not (os.path.exists(rank0) and "30/30" in open(rank0).read()):
                time.sleep(0.01)
            raise RuntimeError("rank 1 fails once")
        trainkit.report({"loss": 0.1})

    trainkit.DataParallelTrainer(
        train_fn, train_loop_config={"run": os.path.join(sys.argv[1], "out")},
        scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=trainkit.RunConfig(name="out", storage_path=sys.argv[1],
                                      failure_config=trainkit.FailureConfig(max_failures=1))).fit()
    time.sleep(1.5)  # long enough for Ray's log monitor to forward anything it would
''')


def test_rank_output_logged_per_attempt_progress_once_not_doubled(tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = subprocesses.run([sys.executable, str(driver), str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    console = out.stdout + out.stderr
    for attempt in (0, 1):
        for rank in (0, 1):
            assert console.count(f"hello from rank {rank} attempt {attempt}") == 1, console[-3000:]
    bars = [line for line in console.splitlines() if "epoch:" in line]
    assert len(bars) == 4 and all("30/30" in line for line in bars), bars  # each rank's finished bar, once

    logs = tmp_path / "out" / "logs"
    assert sorted(p.relative_to(logs).as_posix() for p in logs.rglob("*.txt")) == [
        "attempt_0/rank_0.txt", "attempt_0/rank_1.txt", "attempt_1/rank_0.txt", "attempt_1/rank_1.txt"]
    failed = (logs / "attempt_0" / "rank_1.txt").read_text().splitlines()
    assert failed[0] == "hello from rank 1 attempt 0"
    assert failed[1].startswith("epoch: 100%") and "30/30" in failed[1] and "\r" not in failed[1]
