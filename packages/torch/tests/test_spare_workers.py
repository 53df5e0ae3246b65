"""A second fit in one driver takes workers prestarted when the first ended, and inherits nothing of it."""

import os
import sys
import threading

import pytest
import ray

import trainkit
from trainkit import ScalingConfig
from trainkit._internal.worker import spare
from trainkit_torch import TorchTrainer

_held_files = []  # fit 1's open files, kept open for as long as its process lives


def leave_traces(config):
    """Fit 1: everything a training function can leave behind in its process."""
    import torch.distributed as dist

    sys.path.insert(0, config["dir"])
    import user_module  # noqa: F401 - the user's own code, imported from their directory

    rank = trainkit.get_context().get_world_rank()
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["SET_BY_FIT_1"] = "1"
    os.environ["CUDA_VISIBLE_DEVICES"] = "7"
    threading.Thread(target=threading.Event().wait, name="fit-1-thread", daemon=True).start()
    _held_files.append(open(os.path.join(config["dir"], f"held-{rank}"), "w"))
    trainkit.report({"pid": os.getpid(), "cuda": seen, "process_group": dist.is_initialized()})


def look_around(config):
    """Fit 2: what its process holds at the start of the training function."""
    import torch
    import torch.distributed as dist

    fds = os.listdir("/proc/self/fd")
    files = {os.readlink(f"/proc/self/fd/{fd}") for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")}
    world = torch.ones(1)
    dist.all_reduce(world)
    trainkit.report({"pid": os.getpid(), "user_module": "user_module" in sys.modules,
                     "set_by_fit_1": os.environ.get("SET_BY_FIT_1"), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                     "threads": [t.name for t in threading.enumerate()],
                     "held": sorted(f for f in files if os.path.basename(f).startswith("held-")),
                     "world": world.item()})


class Collect(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        self.metrics = metrics


def fit(fn, run_config, config):
    collect = Collect()
    TorchTrainer(fn, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                 run_config=run_config(callbacks=[collect])).fit()
    return collect.metrics


def _spare_pids() -> set[int]:
    """Waits for the prestarted workers (test-only synchronization: no sleep) and returns their pids."""
    assert spare._spare is not None, "no workers were prestarted when the fit ended"
    return {info["pid"] for info in ray.get([a.node_info.remote() for a in spare._spare.actors])}


@pytest.fixture
def user_dir(tmp_path):
    (tmp_path / "user_module").mkdir()
    (tmp_path / "user_module" / "__init__.py").write_text("STATE = []\n")
    return str(tmp_path)


def test_a_second_fit_takes_prestarted_workers_that_hold_nothing_of_the_first(ray_cluster, run_config, user_dir,
                                                                              monkeypatch):
    monkeypatch.setenv("TRAINKIT_SPARE_WORKERS", "1")
    first = fit(leave_traces, run_config, {"dir": user_dir})
    assert all(r["process_group"] for r in first)
    prestarted = _spare_pids()
    assert prestarted.isdisjoint(r["pid"] for r in first)  # new processes, not fit 1's

    second = fit(look_around, run_config, {})
    assert {r["pid"] for r in second} == prestarted
    for r, before in zip(second, first):
        assert r["user_module"] is False and r["set_by_fit_1"] is None
        assert r["cuda"] == before["cuda"]  # what Ray gave the process, not what fit 1 set
        assert "fit-1-thread" not in r["threads"] and r["held"] == []
        assert r["world"] == 2.0  # a fresh process group of both ranks
    assert _spare_pids().isdisjoint(prestarted)  # and the next fit gets new ones again


def test_a_group_of_another_shape_stops_the_prestarted_workers_and_starts_cold(ray_cluster, run_config, monkeypatch):
    monkeypatch.setenv("TRAINKIT_SPARE_WORKERS", "1")
    fit(look_around, run_config, {})
    prestarted = _spare_pids()
    collect = Collect()
    TorchTrainer(look_around, train_loop_config={}, scaling_config=ScalingConfig(num_workers=1),
                 run_config=run_config(callbacks=[collect])).fit()
    (only,) = collect.metrics
    assert only["pid"] not in prestarted and only["world"] == 1.0
    assert spare._spare.shape.num_workers == 1  # the next prestarted group has the last fit's shape


def fail_first_attempt(config):
    attempt = trainkit.get_context().get_attempt()
    import torch.distributed as dist

    trainkit.report({"pid": os.getpid(), "attempt": attempt})
    dist.barrier()  # both ranks' reports are in before rank 0 fails
    if attempt == 0 and trainkit.get_context().get_world_rank() == 0:
        raise RuntimeError("attempt 0 fails")


class StandbyWhileRunning(trainkit.UserCallback):
    """At each attempt's report (in the driver, the attempt running): the prestarted workers' pids."""

    def __init__(self):
        self.reports = []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append((metrics, _spare_pids() if spare._spare is not None else None))


@pytest.mark.parametrize("max_failures", [1, 0])
def test_a_run_that_may_restart_keeps_the_next_attempts_workers_ready(ray_cluster, run_config, monkeypatch,
                                                                      max_failures):
    monkeypatch.setenv("TRAINKIT_SPARE_WORKERS", "1")
    monkeypatch.setattr(spare, "_fits", 0)  # the driver's only fit: no next fit to prestart for
    seen = StandbyWhileRunning()
    trainer = TorchTrainer(fail_first_attempt, scaling_config=ScalingConfig(num_workers=2), run_config=run_config(
        callbacks=[seen], failure_config=trainkit.FailureConfig(max_failures=max_failures)))
    if max_failures == 0:
        with pytest.raises(trainkit.TrainingFailedError):
            trainer.fit()
        ((_, standby),) = seen.reports
        assert standby is None  # no restart can follow: nothing waits beside the attempt
        return
    trainer.fit()
    (first, standby), (second, last_standby) = seen.reports
    assert [r["attempt"] for r in first + second] == [0, 0, 1, 1]
    assert standby is not None and standby.isdisjoint(r["pid"] for r in first)
    assert {r["pid"] for r in second} == standby  # the restart took the workers that waited
    assert last_standby is None  # its budget spent, the last attempt prestarts nothing while it runs


def report_pid(config):
    trainkit.report({"pid": os.getpid()})


def test_fits_in_a_row_prestart_the_next_fits_workers_while_they_run(ray_cluster, run_config, monkeypatch):
    """The first fit in a driver prestarts at its end; each later one as it starts, so that a fit
    that follows at once finds its workers' imports done."""
    monkeypatch.setenv("TRAINKIT_SPARE_WORKERS", "1")
    monkeypatch.setattr(spare, "_fits", 0)
    seen = StandbyWhileRunning()
    for _ in range(3):
        TorchTrainer(report_pid, train_loop_config={}, scaling_config=ScalingConfig(num_workers=2),
                     run_config=run_config(callbacks=[seen])).fit()
    (first, during_first), (second, during_second), (third, _) = seen.reports
    assert during_first is None  # one fit so far: a script's single fit starts nothing beside it
    assert during_second is not None and during_second.isdisjoint(r["pid"] for r in second)
    assert {r["pid"] for r in third} == during_second  # the third fit took them


def test_spare_workers_opt_out(ray_cluster, run_config, monkeypatch):
    monkeypatch.setenv("TRAINKIT_SPARE_WORKERS", "0")
    fit(look_around, run_config, {})
    assert spare._spare is None
