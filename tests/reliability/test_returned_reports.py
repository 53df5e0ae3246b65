"""A checkpoint whose ``report()`` returned on every rank is never lost (issue 44 item 1).

The promise (docs/fault-tolerance-and-storage.md): once a checkpoint report's ``report()`` has
returned on every rank (SYNC upload; with ASYNC, once every rank's upload of it finished), the next
attempt or the next run of the same name resumes from it or from a later one, whatever the timing:
a rank or the driver SIGKILLed at once after that, the driver slow to poll, the machine busy. Each
rank writes a durable record of the report before ``report()`` returns; the driver commits from
the records on salvage and at the next run's start. Nothing here waits for the driver to have seen
a report: the kills come the instant every rank's ``report()`` returned.
"""

import json
import os
import signal
import sys
import textwrap
import time

import pytest

import trainkit
from trainkit import DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig
from trainkit._internal.storage.metrics_log import read_metrics_log
from trainkit.testing.steps import report_step, resume_step

TWO = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})
KILL_AT = 3  # the 4th report


def _returned(markers: str, attempt: int, step: int, rank: int) -> str:
    return os.path.join(markers, f"{attempt}-{step}-{rank}")


def killed_at_once(config):
    """Both ranks checkpoint every step; once the 4th report returned on every rank, the victim (a
    rank, or the driver: ``victim_pid``) is SIGKILLed at once, with no pause for the driver."""
    ctx = trainkit.get_context()
    rank, attempt, start = ctx.get_world_rank(), ctx.get_attempt(), resume_step()
    for step in range(start, config["steps"]):
        report_step(step, {"step": step, "start": start, "attempt": attempt},
                    files={f"shard-{rank}": os.urandom(1024)})
        open(_returned(config["markers"], attempt, step, rank), "w").close()
        if attempt == 0 and step == KILL_AT and rank == config["killer"]:
            while not os.path.exists(_returned(config["markers"], attempt, step, 1 - rank)):
                time.sleep(0.001)
            os.kill(config.get("victim_pid") or os.getpid(), signal.SIGKILL)
            time.sleep(3600)  # the driver is gone: wait to be reaped
        if attempt == 0 and step == KILL_AT:
            time.sleep(3600)  # the peer's death ends the attempt
    return start


@pytest.fixture(params=["local", "s3"])
def storage_path(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "runs")
    return request.getfixturevalue("s3_server")["uri"]


@pytest.mark.parametrize("warm_workers", ["1", "0"])
def test_a_rank_killed_at_once_after_every_rank_returned_loses_no_checkpoint(
        ray_cluster, storage_path, tmp_path, monkeypatch, warm_workers):
    monkeypatch.setenv("TRAINKIT_SPARE_WORKERS", warm_workers)  # prestarted standbys slowed the driver's polls
    name = f"returned-{warm_workers}-{os.getpid()}-{time.monotonic_ns()}"
    result = DataParallelTrainer(
        killed_at_once, train_loop_config={"steps": KILL_AT + 2, "markers": str(tmp_path), "killer": 1},
        scaling_config=TWO, run_config=RunConfig(name=name, storage_path=storage_path, verbose=0,
                                                 failure_config=FailureConfig(max_failures=2))).fit()
    assert result.return_value == KILL_AT + 1, "attempt 1 did not resume from the 4th checkpoint"
    lines = read_metrics_log(result.filesystem, result.path)
    assert [(line["attempt"], line["metrics"]["step"]) for line in lines] == \
        [(0, 0), (0, 1), (0, 2), (0, 3), (1, 4)]
    assert result.checkpoint.verify()["files"].keys() == {"step", "shard-0", "shard-1"}


DRIVER = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {tests!r})
    import ray.cloudpickle
    import trainkit
    import test_returned_reports
    from test_returned_reports import killed_at_once, TWO
    ray.cloudpickle.register_pickle_by_value(test_returned_reports)  # the workers cannot import it
    storage, name, markers = sys.argv[1:4]
    result = trainkit.DataParallelTrainer(
        killed_at_once, train_loop_config={{"steps": 5, "markers": markers, "killer": 0, "victim_pid": os.getpid()}},
        scaling_config=TWO, run_config=trainkit.RunConfig(name=name, storage_path=storage, verbose=0)).fit()
    print(json.dumps({{"start": result.return_value, "checkpoint": os.path.basename(result.checkpoint.path)}}))
""")


def test_the_driver_killed_at_once_after_every_rank_returned_loses_no_checkpoint(storage_path, tmp_path, processes):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER.format(tests=os.path.dirname(__file__)))
    name = f"driver-killed-{os.getpid()}-{time.monotonic_ns()}"
    args = [sys.executable, str(script), storage_path, name, str(tmp_path)]
    env = {**os.environ, "TRAINKIT_VERBOSE": "0"}
    first = processes.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == -signal.SIGKILL, first.stderr
    second = processes.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    outcome = json.loads(second.stdout.strip().splitlines()[-1])
    assert outcome == {"start": KILL_AT + 1, "checkpoint": "checkpoint_000004"}, second.stderr
