"""num_workers=0 runs the function in the driver process, with the same API and storage, and no Ray."""

import json
import os
import sys
import textwrap
from dataclasses import dataclass

from trainkit.backend import Backend, BackendConfig
from trainkit.testing import subprocesses


def test_local_mode_runs_in_process_without_ray(tmp_path):
    script = textwrap.dedent(f"""
        import json, os, sys, tempfile
        import trainkit

        def train_fn(config):
            ctx = trainkit.get_context()
            assert (ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank()) == (0, 1, 0)
            for step in range(config["steps"]):
                with tempfile.TemporaryDirectory() as tmp:
                    open(os.path.join(tmp, "w.txt"), "w").write(str(step))
                    trainkit.report({{"step": step, "pid": os.getpid()}},
                                    checkpoint=trainkit.Checkpoint.from_directory(tmp))
            committed = trainkit.get_all_reported_checkpoints(timeout_s=5)
            return len(committed)

        result = trainkit.DataParallelTrainer(
            train_fn, train_loop_config={{"steps": 3}},
            scaling_config=trainkit.ScalingConfig(num_workers=0),
            run_config=trainkit.RunConfig(name="local", storage_path={str(tmp_path)!r}, verbose=0,
                                          checkpoint_config=trainkit.CheckpointConfig(num_to_keep=1))).fit()
        print(json.dumps({{"metrics": result.metrics, "driver_pid": os.getpid(), "ray": "ray" in sys.modules,
                          "return_value": result.return_value, "checkpoint": result.checkpoint.path}}))
    """)
    out = subprocesses.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["metrics"]["pid"] == summary["driver_pid"] and summary["metrics"]["step"] == 2
    assert summary["ray"] is False
    assert summary["return_value"] == 1  # get_all_reported_checkpoints: the one num_to_keep=1 kept, as in Ray
    assert sorted(os.listdir(tmp_path / "local")) == ["checkpoint_000002", "metrics.jsonl", "run_state.json",
                                                      "run_state.json.prev"]


def _fail_after_a_report(config):
    import trainkit
    from trainkit.testing.steps import report_step, resume_step

    step = resume_step()
    if step == 0:
        with open(config["big"], "rb") as f:
            payload = f.read()
        report_step(0, {"step": 0}, files={"big.bin": payload})  # SYNC: copied, hashing in the background
        raise RuntimeError("fails right after report() returned")
    trainkit.report({"resumed_at": step})


def test_a_report_that_returned_before_an_error_still_commits(tmp_path, run_config):
    import trainkit

    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(64 << 20))  # hashing 64 MiB outlasts the raise that follows the report
    result = trainkit.DataParallelTrainer(
        _fail_after_a_report, train_loop_config={"big": str(big)},
        scaling_config=trainkit.ScalingConfig(num_workers=0),
        run_config=run_config(failure_config=trainkit.FailureConfig(max_failures=1))).fit()
    assert result.metrics == {"resumed_at": 1}


def test_ray_tune_style_run_name_and_token_metrics_are_accepted(tmp_path):
    """A Tune trial's name (``=``) is a run name; ``tokens_per_second`` is a metric, not a secret;
    a reported secret setting is stored masked."""
    import trainkit

    def train_fn():
        trainkit.report({"tokens_per_second": 1200.0, "num_input_tokens_seen": 4096,
                         "args": {"hub_token": "hf_canary", "learning_rate": 0.1}})

    result = trainkit.DataParallelTrainer(
        train_fn, scaling_config=trainkit.ScalingConfig(num_workers=0),
        run_config=trainkit.RunConfig(name="train-trial_id=abc", storage_path=str(tmp_path), verbose=0)).fit()
    assert result.path.endswith("train-trial_id=abc")
    assert result.metrics == {"tokens_per_second": 1200.0, "num_input_tokens_seen": 4096,
                              "args": {"hub_token": "***", "learning_rate": 0.1}}
    stored = "".join(open(os.path.join(d, f), errors="replace").read()
                     for d, _, files in os.walk(tmp_path) for f in files)
    assert "hf_canary" not in stored



class _OncePerProcess(Backend):
    """A framework that, like torch.distributed, refuses a second init in the same process."""

    up = False

    def on_local_start(self, backend_config):
        if _OncePerProcess.up:
            raise RuntimeError("already initialized: the failed attempt was never torn down")
        _OncePerProcess.up = True

    def on_local_shutdown(self, backend_config):
        _OncePerProcess.up = False


@dataclass
class _OncePerProcessConfig(BackendConfig):
    @property
    def backend_cls(self):
        return _OncePerProcess


def _fail_first_attempt(config):
    import trainkit

    if trainkit.get_context().get_attempt() == 0:  # the driver process lives on into attempt 1
        raise RuntimeError("first attempt fails")
    trainkit.report({"attempt": 1})


def test_a_failed_local_attempt_is_torn_down_before_the_retry(run_config):
    import trainkit

    result = trainkit.DataParallelTrainer(
        _fail_first_attempt, backend_config=_OncePerProcessConfig(),
        scaling_config=trainkit.ScalingConfig(num_workers=0),
        run_config=run_config(failure_config=trainkit.FailureConfig(max_failures=1))).fit()
    assert result.metrics == {"attempt": 1}
    assert _OncePerProcess.up is False


def test_run_state_follows_reports_after_the_wall_clock_steps_back(tmp_path):
    """run_state.json follows reports without a checkpoint at most every STATE_EVERY_S, timed on the
    monotonic clock: an NTP step back of an hour does not freeze it for an hour."""
    script = textwrap.dedent(f"""
        import json, os, time
        import trainkit
        from trainkit._internal.driver.report_log import STATE_EVERY_S

        def saved_reports():
            with open(os.path.join({str(tmp_path)!r}, "clock", "run_state.json")) as f:
                return json.load(f)["next_report_index"]

        def train_fn():
            trainkit.report({{"step": 0}})
            wall = time.time
            time.time = lambda: wall() - 3600  # the clock steps back an hour
            seen = []
            for step in (1, 2):
                time.sleep(STATE_EVERY_S * 1.1)  # (sleep follows the monotonic clock)
                trainkit.report({{"step": step}})
                seen.append(saved_reports())
            time.time = wall
            return seen

        result = trainkit.DataParallelTrainer(
            train_fn, scaling_config=trainkit.ScalingConfig(num_workers=0),
            run_config=trainkit.RunConfig(name="clock", storage_path={str(tmp_path)!r}, verbose=0)).fit()
        print(json.dumps(result.return_value))
    """)
    out = subprocesses.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [2, 3]
