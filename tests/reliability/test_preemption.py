"""Preemption, Ray Train 2.60's pattern: a real SIGTERM to a real worker process is a notice every rank
sees at the same step; the just-in-time checkpoint commits before the deadline; the restart resumes
from it and is counted against max_preemption_failures, not max_failures. (A node drain: the
multi-host suite, tests/multihost.)"""

import json
import os
import signal
import time

import pytest

import trainkit
from trainkit import DataParallelTrainer, FailureConfig, PreemptionError, ScalingConfig
from trainkit.testing.steps import report_step, resume_step

TWO = ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})


def train_until_preempted(config):
    """Steps until the run is preempted; at the first notice a just-in-time checkpoint (rank 0's
    files); later attempts run ``steps_after`` steps and return."""
    ctx = trainkit.get_context()
    rank, attempt, start = ctx.get_world_rank(), ctx.get_attempt(), resume_step()
    saved = False
    trainkit.collective.barrier()  # the ranks step together: both reach the step a notice names in time
    for step in range(start, start + (config["steps_after"] if attempt else 100_000)):
        metrics = {"step": step, "start": start, "attempt": attempt, "pid": os.getpid(), "t": time.time()}
        info = trainkit.get_preemption_info()
        if info is not None and not saved:
            saved = True
            with open(os.path.join(config["markers"], f"seen-{attempt}-{rank}.json"), "w") as f:
                json.dump({"step": step, "deadline_ms": info.deadline_ms, "ranks": info.preempted_ranks,
                           "nodes": info.preempted_node_ids}, f)
            if config.get("preempted_rank_dies") and rank in info.preempted_ranks:
                os.kill(os.getpid(), signal.SIGKILL)  # gone before its part of the checkpoint
            report_step(step, {**metrics, "jit": True, "deadline_ms": info.deadline_ms}, rank0_only=True)
            if config.get("return_after_jit"):
                return
            continue
        trainkit.report(metrics)
        time.sleep(0.02)


class Cloud(trainkit.UserCallback):
    """SIGTERMs rank 1 once attempt 0 made 3 reports; with ``kill_after_jit``, SIGKILLs it once the
    just-in-time checkpoint committed (the node reclaimed)."""

    def __init__(self, kill_after_jit: bool):
        self.kill_after_jit = kill_after_jit
        self.sigterm_at = None
        self.pid = None
        self.jit = None
        self.first_report = {}  # attempt -> its first report's rank-0 metrics

    def after_report(self, run_context, metrics, checkpoint):
        self.first_report.setdefault(run_context.attempt, metrics[0])
        if run_context.attempt == 0 and self.sigterm_at is None and metrics[0]["step"] >= 2:
            self.pid, self.sigterm_at = metrics[1]["pid"], time.time()
            os.kill(self.pid, signal.SIGTERM)
        if metrics[0].get("jit") and checkpoint is not None and self.jit is None:
            self.jit = {"committed": time.time(), **metrics[0]}
            if self.kill_after_jit:
                os.kill(self.pid, signal.SIGKILL)


def seen(markers, attempt=0):
    return {rank: json.load(open(os.path.join(markers, f"seen-{attempt}-{rank}.json")))
            for rank in (0, 1) if os.path.exists(os.path.join(markers, f"seen-{attempt}-{rank}.json"))}


def run_state(result_or_config):
    path = getattr(result_or_config, "path", None) or os.path.join(result_or_config.storage_path,
                                                                   result_or_config.name)
    return json.load(open(os.path.join(path, "run_state.json")))


def test_sigterm_to_a_worker_every_rank_sees_it_at_one_step_jit_commits_restart_is_a_preemption(
        ray_cluster, run_config, tmp_path, figure, check_run_dir):
    cloud = Cloud(kill_after_jit=True)
    result = DataParallelTrainer(
        train_until_preempted, train_loop_config={"markers": str(tmp_path), "steps_after": 3}, scaling_config=TWO,
        run_config=run_config(callbacks=[cloud], failure_config=FailureConfig(max_failures=0))).fit()
    notices = seen(str(tmp_path))
    # every rank got the same notice at the same step
    assert set(notices) == {0, 1} and notices[0] == notices[1], notices
    notice = notices[0]
    assert notice["ranks"] == [1] and len(notice["nodes"]) == 1
    # the deadline: $TRAINKIT_SIGTERM_DEADLINE_S (30 s) after the signal reached the worker
    assert cloud.sigterm_at * 1000 + 30_000 - 5 <= notice["deadline_ms"] <= cloud.jit["committed"] * 1000 + 30_000
    assert cloud.jit["step"] == notice["step"] and cloud.jit["committed"] * 1000 < notice["deadline_ms"]
    # restarted from the just-in-time checkpoint, counted as a preemption (max_failures=0 is untouched)
    state = check_run_dir(result.path)
    assert [f["type"] for f in state["failures"]] == ["Preempted"], state["failures"]
    assert cloud.first_report[1]["start"] == notice["step"] + 1
    assert result.metrics["step"] == notice["step"] + 3 and result.error is None
    figure("P1", f"SIGTERM to rank 1: both ranks saw the notice at step {notice['step']}; JIT checkpoint committed "
                 f"{cloud.jit['committed'] - cloud.sigterm_at:.2f} s after the signal, "
                 f"{notice['deadline_ms'] / 1000 - cloud.jit['committed']:.1f} s before the deadline; resumed at "
                 f"step {cloud.first_report[1]['start']}, counted as preemption 1 (max_failures=0)")


def test_exceeding_max_preemption_failures_fails_naming_it(ray_cluster, run_config, tmp_path):
    config = run_config(callbacks=[Cloud(kill_after_jit=True)],
                        failure_config=FailureConfig(max_failures=3, max_preemption_failures=0))
    with pytest.raises(PreemptionError, match=r"preemption 1 of FailureConfig.max_preemption_failures=0: "
                                              "no retries left") as info:
        DataParallelTrainer(train_until_preempted, train_loop_config={"markers": str(tmp_path), "steps_after": 3},
                            scaling_config=TWO, run_config=config).fit()
    assert info.value.preemption_info.preempted_ranks == [1] and info.value.rank == 1
    assert not info.value.drain_timed_out  # rank 1 died (SIGKILL) before the deadline
    state = run_state(config)
    assert state["status"] == "failed" and [f["type"] for f in state["failures"]] == ["Preempted"]


def test_the_driver_restarts_at_the_deadline_plus_preemption_grace_s(ray_cluster, run_config, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("TRAINKIT_SIGTERM_DEADLINE_S", "2")  # forwarded to the workers
    cloud = Cloud(kill_after_jit=False)  # nobody kills the rank: the driver stops the attempt itself
    result = DataParallelTrainer(
        train_until_preempted, train_loop_config={"markers": str(tmp_path), "steps_after": 3}, scaling_config=TWO,
        run_config=run_config(callbacks=[cloud], failure_config=FailureConfig(preemption_grace_s=1.5))).fit()
    # not before the deadline (2 s after the signal reached rank 1) plus the grace: the ranks kept training
    # until then (whether a busy driver relayed the notice to them in those 3.5 s or not)
    assert cloud.first_report[1]["t"] >= cloud.sigterm_at + 2 + 1.5
    for notice in seen(str(tmp_path)).values():
        assert notice["deadline_ms"] <= cloud.sigterm_at * 1000 + 2000 + 60_000
        assert cloud.first_report[1]["t"] >= notice["deadline_ms"] / 1000 + 1.5
    state = run_state(result)
    assert [f["type"] for f in state["failures"]] == ["Preempted"]
    assert "drain_timed_out=True" in state["failures"][0]["message"]


@pytest.mark.parametrize("relax", [True, False])
def test_relax_collectives_on_preemption_commits_without_the_preempted_rank(ray_cluster, run_config, tmp_path,
                                                                              relax):
    """Rank 1 dies at the notice, before its part of the just-in-time report; rank 0 returns after it."""
    cloud = Cloud(kill_after_jit=False)
    result = DataParallelTrainer(
        train_until_preempted, scaling_config=TWO,
        train_loop_config={"markers": str(tmp_path), "steps_after": 3, "preempted_rank_dies": True,
                           "return_after_jit": True},
        run_config=run_config(callbacks=[cloud], failure_config=FailureConfig(
            relax_collectives_on_preemption=relax))).fit()
    notice = seen(str(tmp_path))[0]
    state = run_state(result)
    assert [f["type"] for f in state["failures"]] == ["Preempted"]
    if relax:  # committed with rank 0's report alone; resumed from it
        assert cloud.jit is not None and cloud.jit["step"] == notice["step"]
        assert cloud.first_report[1]["start"] == notice["step"] + 1
    else:  # the report waited for rank 1, which never made it: resumed from scratch
        assert cloud.jit is None and cloud.first_report[1]["start"] == 0


def test_a_notice_without_a_deadline_waits_on_the_monotonic_clock(monkeypatch):
    """A drain without a deadline waits UNKNOWN_DEADLINE_S from its notice: a wall-clock step of an
    hour (NTP, a VM resumed) neither ends that wait early nor, stepped back, prolongs it."""
    from types import SimpleNamespace

    from trainkit._internal.worker import preemption

    watch = preemption.PreemptionWatch([SimpleNamespace(world_rank=0, node_id="n")], grace_s=0.0)
    watch.on_rank(0, None)
    wall, monotonic = time.time(), time.monotonic()
    monkeypatch.setattr(preemption.time, "time", lambda: wall + 3600)
    assert not watch.deadline_passed()
    monkeypatch.setattr(preemption.time, "monotonic", lambda: monotonic + preemption.UNKNOWN_DEADLINE_S + 1)
    monkeypatch.setattr(preemption.time, "time", lambda: wall - 3600)
    assert watch.deadline_passed()
