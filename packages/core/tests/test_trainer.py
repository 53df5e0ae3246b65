"""DataParallelTrainer on real Ray workers (no ML framework): reports, commits, failures, resume."""

import contextlib
import dataclasses
import json
import os
import signal
import sys
import tempfile
import threading
import time

import pytest

import trainkit
from trainkit import Checkpoint, DataParallelTrainer, FailureConfig, ScalingConfig
from trainkit.testing.steps import report_step, resume_step, wait_until_logged

TWO = ScalingConfig(num_workers=2)


def report_with_shards(config):
    ctx = trainkit.get_context()
    rank = ctx.get_world_rank()
    for step in range(config["steps"]):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, f"shard-{rank}.txt"), "w") as f:
                f.write(f"step {step} rank {rank}")
            trainkit.report({"step": step, "rank": rank, "world": ctx.get_world_size()},
                            checkpoint=Checkpoint.from_directory(tmp))
    print(f"hello from {rank}")
    return f"done {rank}"


class Recorder(trainkit.UserCallback):
    def __init__(self):
        self.reports = []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append((metrics, checkpoint))


def test_two_workers_report_and_commit(ray_cluster, run_config, capfd):
    recorder = Recorder()
    result = DataParallelTrainer(report_with_shards, train_loop_config={"steps": 3}, scaling_config=TWO,
                                 run_config=run_config(callbacks=[recorder])).fit()
    assert result.error is None and result.return_value == "done 0"
    assert result.metrics == {"step": 2, "rank": 0, "world": 2}
    assert sorted(os.listdir(result.checkpoint.path)) == [".manifest.json", "shard-0.txt", "shard-1.txt"]
    manifest = json.load(open(os.path.join(result.checkpoint.path, ".manifest.json")))
    assert sorted(manifest["files"]) == ["shard-0.txt", "shard-1.txt"]
    assert [m for m, _ in recorder.reports][1] == [{"step": 1, "rank": 0, "world": 2}, {"step": 1, "rank": 1, "world": 2}]
    lines = [json.loads(line) for line in open(os.path.join(result.path, "metrics.jsonl"))]
    assert [line["index"] for line in lines] == [0, 1, 2]
    assert [c.path.rsplit("/", 1)[1] for c, _ in result.best_checkpoints] == \
        ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    state = json.load(open(os.path.join(result.path, "run_state.json")))
    assert state["status"] == "finished"
    profile = state["start_profile"]  # where the attempt's start went, phase by phase (trainkit show)
    assert sorted(profile) == sorted(["ray_start", "placement", "actors", "setup", "backend", "launch", "first_report"])
    assert all(0 <= seconds < 60 for seconds in profile.values())
    out = capfd.readouterr().out
    assert "(rank 0) hello from 0" in out and "(rank 1) hello from 1" in out
    assert trainkit.Result.from_path(result.path).checkpoint == result.checkpoint


def crash_once_then_resume(config):
    ctx = trainkit.get_context()
    for step in range(resume_step(), 4):
        report_step(step, {"step": step, "attempt": ctx.get_attempt()}, rank0_only=True)
        if step == 1 and ctx.get_attempt() == 0 and ctx.get_world_rank() == 1:
            wait_until_logged(2)  # reports 0 and 1 committed: a kill loses only what was unsent
            os._exit(1)  # the process dies, as on an OOM kill


def test_restart_from_last_committed_checkpoint(ray_cluster, run_config):
    result = DataParallelTrainer(crash_once_then_resume, scaling_config=TWO,
                                 run_config=run_config(failure_config=FailureConfig(max_failures=1))).fit()
    lines = [json.loads(line) for line in open(os.path.join(result.path, "metrics.jsonl"))]
    assert [(line["metrics"]["step"], line["metrics"]["attempt"]) for line in lines] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert [line["index"] for line in lines] == [0, 1, 2, 3]
    state = json.load(open(os.path.join(result.path, "run_state.json")))
    assert len(state["failures"]) == 1 and state["failures"][0]["type"] == "WorkerDied"
    assert "placement" in state["start_profile"] and "ray_start" not in state["start_profile"]  # the restart's


def report_placement_then_fail_once():
    import ray

    from trainkit import collective

    ctx = trainkit.get_context()
    trainkit.report({"attempt": ctx.get_attempt(), "placement": ray.util.get_current_placement_group().id.hex()})
    if ctx.get_attempt() == 0 and ctx.get_world_rank() == 0:
        collective.barrier()  # rank 1's report is in before the attempt fails
        raise RuntimeError("attempt 0 fails")
    if ctx.get_attempt() == 0:
        collective.barrier()


def test_a_restart_takes_the_failed_attempts_placement_group_and_the_run_frees_it(ray_cluster, run_config,
                                                                                  monkeypatch):
    import ray

    from trainkit._internal.worker import worker_group

    monkeypatch.setenv("TRAINKIT_SPARE_WORKERS", "0")  # prestarted workers are in no placement group
    recorder = Recorder()
    DataParallelTrainer(report_placement_then_fail_once, scaling_config=TWO, run_config=run_config(
        callbacks=[recorder], failure_config=FailureConfig(max_failures=1))).fit()
    (first, _), (second, _) = recorder.reports
    assert [m["attempt"] for m in first + second] == [0, 0, 1, 1]
    (placement,) = {m["placement"] for m in first + second}  # the restart waited for no new one
    assert worker_group._kept_placement is None
    assert ray.util.placement_group_table()[placement]["state"] == "REMOVED"


def test_rerun_with_same_name_resumes(ray_cluster, run_config):
    config = run_config(name="resumable")
    first = DataParallelTrainer(report_with_shards, train_loop_config={"steps": 2}, scaling_config=TWO,
                                run_config=config).fit()

    def check_resume():
        checkpoint = trainkit.get_checkpoint()
        assert checkpoint is not None and checkpoint.path.endswith("checkpoint_000001")
        trainkit.report({"resumed": True})

    second = DataParallelTrainer(check_resume, scaling_config=TWO, run_config=config).fit()
    assert second.path == first.path and second.metrics == {"resumed": True}
    indices = [json.loads(line)["index"] for line in open(os.path.join(second.path, "metrics.jsonl"))]
    assert indices == [0, 1, 2]


def test_unpicklable_function_fails_before_workers_start(run_config):
    import threading

    lock = threading.Lock()

    def uses_lock():
        with lock:
            pass

    with pytest.raises(TypeError, match="cannot be sent to workers"):
        DataParallelTrainer(uses_lock, scaling_config=TWO, run_config=run_config()).fit()


_entered = threading.local()


@dataclasses.dataclass
class _ThreadStateConfig(trainkit.BackendConfig):
    """A backend whose framework state must live in the training thread (as XGBoost's communicator)."""

    @contextlib.contextmanager
    def train_fn_context(self):
        _entered.value = threading.get_ident()
        yield
        _entered.value = None


def _thread_state_fn():
    trainkit.report({"entered_in_this_thread": getattr(_entered, "value", None) == threading.get_ident()})


@pytest.mark.parametrize("num_workers", [0, 2])
def test_backend_config_context_wraps_the_training_thread(ray_cluster, run_config, num_workers):
    result = DataParallelTrainer(_thread_state_fn, backend_config=_ThreadStateConfig(),
                                 scaling_config=ScalingConfig(num_workers=num_workers), run_config=run_config()).fit()
    assert result.metrics == {"entered_in_this_thread": True}


def raise_right_after_a_checkpoint(config):
    from trainkit import collective

    ctx = trainkit.get_context()
    checkpoint = trainkit.get_checkpoint()
    start = 0 if checkpoint is None else int(checkpoint.path.rsplit("_", 1)[1]) + 1
    for step in range(start, 3):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, f"state-{ctx.get_world_rank()}.bin"), "wb") as f:
                f.write(os.urandom(32 << 20))  # hashing it outlasts the raise below
            trainkit.report({"step": step, "attempt": ctx.get_attempt()}, checkpoint=Checkpoint.from_directory(tmp))
        if ctx.get_attempt() == 0:
            # once every rank's report() returned (a loaded machine once let rank 1 raise before rank 0 reported)
            collective.barrier()
            raise RuntimeError("right after report() returned")


def test_a_checkpoint_whose_report_returned_before_an_exception_is_kept(ray_cluster, run_config):
    result = DataParallelTrainer(raise_right_after_a_checkpoint, scaling_config=TWO,
                                 run_config=run_config(failure_config=FailureConfig(max_failures=1))).fit()
    lines = [json.loads(line) for line in open(os.path.join(result.path, "metrics.jsonl"))]
    # the step-0 checkpoint committed although both ranks raised the moment report() returned
    assert [(line["metrics"]["step"], line["attempt"]) for line in lines] == [(0, 0), (1, 1), (2, 1)]


def one_rank_fails_while_its_peer_uploads(config):
    """Rank 0's report() returns while its ASYNC upload waits for rank 1 to fail, then takes 1 s
    more; rank 1 reports and fails once rank 0's report() returned."""
    ctx = trainkit.get_context()
    failing, reported = config["failing_marker"], config["failing_marker"] + ".rank0-reported"
    if ctx.get_attempt() > 0:
        trainkit.report({"step": 1})
        return

    def slow_upload(checkpoint, destination):
        while not os.path.exists(failing):
            time.sleep(0.01)
        time.sleep(1.0)  # well past the failure: the upload ends while the driver salvages
        os.makedirs(destination)
        open(os.path.join(destination, "state"), "w").write("step 0")
        return Checkpoint(destination)

    if ctx.get_world_rank() == 0:
        trainkit.report({"step": 0}, checkpoint=Checkpoint.from_directory(tempfile.mkdtemp()),
                        checkpoint_upload_mode=trainkit.CheckpointUploadMode.ASYNC, checkpoint_upload_fn=slow_upload)
        open(reported, "w").close()
        time.sleep(600)  # alive, busy training, until the attempt ends
    # not before rank 0's report() returned (a loaded CI machine let rank 1 fail before rank 0 reported)
    while not os.path.exists(reported):
        time.sleep(0.01)
    trainkit.report({"step": 0})
    open(failing, "w").close()
    raise RuntimeError("rank 1 fails while rank 0 uploads")


def test_a_live_peers_upload_of_a_returned_report_commits_after_another_rank_fails(
        ray_cluster, run_config, tmp_path):
    """A report() that returned on every rank is not lost to another rank's failure, however long a
    live rank's background upload of it still takes (up to SALVAGE_S, as the failed rank's own)."""
    result = DataParallelTrainer(one_rank_fails_while_its_peer_uploads,
                                 train_loop_config={"failing_marker": str(tmp_path / "failing")},
                                 scaling_config=TWO, run_config=run_config(
                                     failure_config=FailureConfig(max_failures=1))).fit()
    lines = [json.loads(line) for line in open(os.path.join(result.path, "metrics.jsonl"))]
    assert [(line["metrics"]["step"], line["attempt"]) for line in lines] == [(0, 0), (1, 1)]
    assert lines[0]["checkpoint"] == "checkpoint_000000"


def test_a_drained_ranks_polls_stop_waiting():
    """After a failure the driver drains the live ranks: a poll waiting there (one that would wait
    forever here) answers at once, and later ones do not wait."""
    from trainkit._internal.worker.events import EventQueue

    events, answers = EventQueue(), []
    waiting = threading.Thread(target=lambda: answers.append(events.take(None, 10)))
    waiting.start()
    assert events.close() == []
    waiting.join(timeout=60)
    assert not waiting.is_alive() and answers == [[]]
    events.put("late")
    assert events.take(None, 10) == ["late"] and events.take(None, 10) == []


def test_a_killed_worker_is_named_with_its_last_output(ray_cluster, run_config):
    """An opaque ActorDiedError (the process SIGKILLed, as the OOM killer does) names the rank and
    shows what it printed last."""
    config = run_config()
    log = os.path.join(config.storage_path, config.name, "logs", "attempt_0", "rank_1.txt")

    def killed_on_rank_1():
        if trainkit.get_context().get_world_rank() == 1:
            print("loading shard 7 of 9", file=sys.stderr)
            while "loading shard 7 of 9" not in (open(log).read() if os.path.exists(log) else ""):
                time.sleep(0.05)  # until the driver has the line: a kill loses only what was unsent
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(30)

    with pytest.raises(trainkit.WorkerGroupError) as died:
        DataParallelTrainer(killed_on_rank_1, scaling_config=TWO, run_config=config).fit()
    error = died.value
    assert (error.rank, error.error_type, list(error.worker_failures)) == (1, "WorkerDied", [1])
    message = str(error)
    assert message.startswith("rank 1 died: its worker process (pid ") and "exited unexpectedly (ActorDiedError" in message
    assert "the kernel's log names no out-of-memory kill of it" in message or "could not be read" in message
    assert "Last output of rank 1" in message and "loading shard 7 of 9" in message
    assert "attempt_0/rank_1.txt" in message


class StallsAtFirstReport(trainkit.UserCallback):
    """A tracking callback whose first log call takes ``seconds`` (a slow tracking server): the
    driver is busy. ``marker``: a file created as the stall begins."""
    def __init__(self, seconds, marker=None):
        self.seconds, self.marker = seconds, marker

    def after_report(self, run_context, metrics, checkpoint):
        if run_context.attempt == 0 and run_context.report_index == 0:
            if self.marker:
                open(self.marker, "w").close()
            time.sleep(self.seconds)


def dies_while_the_driver_is_busy(config):
    from trainkit import collective

    ctx = trainkit.get_context()
    for step in range(resume_step(), 3):
        if step == 0 and ctx.get_attempt() == 0 and ctx.get_world_rank() == 1:
            time.sleep(0.3)  # rank 1's report completes report 0: the driver commits as it receives it
        report_step(step, {"step": step}, rank0_only=True)
        if step == 0 and ctx.get_attempt() == 0:
            while not os.path.exists(config["busy_marker"]):
                time.sleep(0.01)
        print(f"rank {ctx.get_world_rank()} finished step {step}")
        if step == 1 and ctx.get_attempt() == 0:
            collective.barrier()  # report 1 returned on every rank, and the line was printed
            if ctx.get_world_rank() == 1:
                os._exit(1)


def test_what_a_rank_sent_before_it_died_reaches_the_driver_even_while_the_driver_is_busy(
        ray_cluster, run_config, tmp_path):
    """Workers' events are received as they come, not between the driver's commits and callbacks:
    a rank that dies while the driver waits on a slow callback (or a slow store) loses none of its
    output, and the checkpoint whose report() returned on every rank before the death commits."""
    marker = str(tmp_path / "driver-busy")
    result = DataParallelTrainer(dies_while_the_driver_is_busy, train_loop_config={"busy_marker": marker},
                                 scaling_config=TWO, run_config=run_config(
                                     failure_config=FailureConfig(max_failures=1), callbacks=[StallsAtFirstReport(2, marker)])).fit()
    lines = [json.loads(line) for line in open(os.path.join(result.path, "metrics.jsonl"))]
    assert [(line["metrics"]["step"], line["attempt"]) for line in lines] == [(0, 0), (1, 0), (2, 1)]
    log = open(os.path.join(result.path, "logs", "attempt_0", "rank_1.txt")).read()
    assert "rank 1 finished step 0" in log and "rank 1 finished step 1" in log, log


def reports_fast(config):
    for i in range(3000):
        trainkit.report({"i": i})


def test_a_driver_behind_on_a_backlog_does_not_call_live_ranks_hung(ray_cluster, run_config):
    """A rank is hung when it leaves the driver's poll unanswered, not when the driver has not yet
    got round to what it sent: the stall (2.5 x worker_timeout_s) and the backlog after it are longer."""
    # 10 s, not 0.75: room for a live rank to answer the poll on a busy machine (3 s failed beside two
    # busy loops: "rank 1 stopped responding"); the stall is still 2.5 x worker_timeout_s
    result = DataParallelTrainer(reports_fast, scaling_config=TWO, run_config=run_config(
        failure_config=FailureConfig(worker_timeout_s=10), callbacks=[StallsAtFirstReport(25)])).fit()
    assert result.error is None and result.metrics == {"i": 2999}


class FailingCallback(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        raise KeyError("callback bug")


def test_ray_train_error_names_tell_worker_from_driver_failures(ray_cluster, run_config):
    """Ray Train's ``except WorkerGroupError`` / ``except ControllerError`` work unchanged."""
    def fails_on_rank_1():
        if trainkit.get_context().get_world_rank() == 1:
            raise ValueError("bad batch")
        trainkit.report({"ok": 1})

    with pytest.raises(trainkit.WorkerGroupError) as worker_error:
        DataParallelTrainer(fails_on_rank_1, scaling_config=TWO, run_config=run_config()).fit()
    assert list(worker_error.value.worker_failures) == [1]
    assert isinstance(worker_error.value.worker_failures[1], ValueError)

    with pytest.raises(trainkit.ControllerError) as controller_error:
        DataParallelTrainer(lambda: trainkit.report({"x": 1}), scaling_config=ScalingConfig(num_workers=1),
                            run_config=run_config(callbacks=[FailingCallback()])).fit()
    assert isinstance(controller_error.value.controller_failure, KeyError)
    assert isinstance(controller_error.value, trainkit.TrainingFailedError)


def test_a_restart_keeps_the_failed_attempts_placement_only_while_its_nodes_are_fit(ray_cluster):
    """A restart reuses the failed attempt's placement group (0.5-0.9 s less than a new one) unless the
    failure cut a node off: an unreachable rank (its node not yet marked dead), a preemption, a node
    Ray's table marks dead. tests/multihost partitions a real host for the first."""
    import ray
    from types import SimpleNamespace

    from trainkit._internal.driver.failures import cut_off_a_node as _cut_off_a_node
    from trainkit._internal.worker.context_types import PreemptionInfo
    from trainkit.errors import PreemptionError, WorkerGroupError

    live = SimpleNamespace(workers=[SimpleNamespace(node_id=ray.get_runtime_context().get_node_id())])
    raised = WorkerGroupError("rank 1 raised ValueError", {1: ValueError("bad batch")}, rank=1)
    killed = WorkerGroupError("rank 1 died", {1: ray.exceptions.ActorDiedError()}, rank=1)
    cut_off = WorkerGroupError("rank 1 is unreachable", {1: ray.exceptions.ActorUnavailableError("cut", None)}, rank=1)
    assert not _cut_off_a_node(raised, live) and not _cut_off_a_node(killed, live)
    assert _cut_off_a_node(cut_off, live) and _cut_off_a_node(PreemptionError(PreemptionInfo(None, {"n": [1]})), live)
    gone = SimpleNamespace(workers=[SimpleNamespace(node_id="ff" * 28)])  # in no node table: not known dead
    assert not _cut_off_a_node(raised, gone)
