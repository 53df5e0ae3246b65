"""`trainkit runs` and `trainkit show`, run as real commands against runs trainkit wrote."""

import json
import os
import re
import sys

import pytest

import trainkit
from trainkit import FailureConfig, ScalingConfig
from trainkit.testing import subprocesses
from trainkit.testing.steps import report_step, resume_step


def fail_once_fn(config):
    for step in range(resume_step(), 4):
        if step == 2 and not os.path.exists(config["marker"]):
            open(config["marker"], "w").close()
            raise RuntimeError("injected failure")
        report_step(step, {"step": step, "accuracy": [0.5, 0.9, 0.7, 0.8][step],
                           "val_loss": [0.9, 0.2, 0.6, 0.4][step]})


def cli(*args, **env):
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", *args], capture_output=True, text=True, timeout=60,
                           env={**os.environ, **env})
    return out.returncode, out.stdout, out.stderr


@pytest.fixture(scope="module")
def storage(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    marker = root / "failed-once"
    for name in ("first", "second"):
        trainkit.DataParallelTrainer(
            fail_once_fn, train_loop_config={"marker": str(marker)}, scaling_config=ScalingConfig(num_workers=0),
            run_config=trainkit.RunConfig(name=name, storage_path=str(root), verbose=0,
                                          failure_config=FailureConfig(max_failures=1))).fit()
    return root


def test_runs_lists_every_run_newest_first(storage):
    code, out, _ = cli("runs", str(storage), "--json")
    assert code == 0
    runs = json.loads(out)
    assert [r["name"] for r in runs] == ["second", "first"]
    first = runs[1]
    assert (first["status"], first["attempts"], first["checkpoints"]) == ("finished", 2, 4)
    assert first["last_metrics"] == {"step": 3, "accuracy": 0.8, "val_loss": 0.4}
    code, table, _ = cli("runs", str(storage))
    assert code == 0 and "first" in table and "finished" in table and "accuracy=0.8" in table


def test_show_gives_attempts_failures_checkpoints_and_the_best(storage):
    code, out, _ = cli("show", str(storage / "first"), "--metric", "accuracy", "--json")
    assert code == 0
    run = json.loads(out)
    assert run["attempts"] == 2 and len(run["failures"]) == 1
    assert "injected failure" in json.dumps(run["failures"][0])
    assert [c["metrics"]["step"] for c in run["checkpoints"]] == [0, 1, 2, 3]
    assert run["best_checkpoint"]["name"] == run["checkpoints"][1]["name"]  # accuracy 0.9
    code, text, _ = cli("show", str(storage / "first"), "--metric", "accuracy", "--mode", "min")
    assert code == 0 and f"{run['checkpoints'][0]['name']} *" in text  # accuracy 0.5, marked best


def test_runs_and_show_default_to_the_default_storage_path(storage):
    code, out, _ = cli("runs", "--json", TRAINKIT_STORAGE_PATH=str(storage))
    assert code == 0 and [r["name"] for r in json.loads(out)] == ["second", "first"]
    code, out, _ = cli("show", "first", "--json", TRAINKIT_STORAGE_PATH=str(storage))  # a bare run name
    assert code == 0 and json.loads(out)["path"] == str(storage / "first")


def test_show_names_a_missing_run(tmp_path):
    code, _, err = cli("show", str(tmp_path / "nope"))
    assert code == 2 and "no trainkit run at" in err


def test_plot_writes_a_png_marking_checkpoints_and_the_restart(storage, tmp_path):
    out = tmp_path / "curves.png"
    code, stdout, stderr = cli("plot", str(storage / "first"), "--metric", "accuracy", "--metric", "step",
                               "-o", str(out), "--json")
    assert code == 0, stderr
    drawn = json.loads(stdout)
    assert drawn["reports"] == 4 and drawn["checkpoints"] == 4 and drawn["restarts_at"] == [2]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_plot_names_the_metrics_a_run_has(storage, tmp_path):
    code, _, err = cli("plot", str(storage / "first"), "--metric", "loss", "-o", str(tmp_path / "x.png"))
    assert code == 2 and "--metric loss" in err and "['accuracy', 'step', 'val_loss']" in err


def test_show_infers_min_for_a_loss_like_metric_and_says_so(storage):
    code, text, _ = cli("show", str(storage / "first"), "--metric", "val_loss")
    assert code == 0
    best = [line for line in text.splitlines() if line.startswith("best ")]
    assert best == ["best         checkpoint_000001 (by val_loss, min, inferred from the name; --mode to choose)"]
    code, text, _ = cli("show", str(storage / "first"), "--metric", "val_loss", "--mode", "max")
    assert "best         checkpoint_000000 (by val_loss, max)" in text
    (failure,) = [line for line in text.splitlines() if line.startswith("failure ")]
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    assert re.fullmatch(rf"failure +{when}  attempt 0  rank 0 raised RuntimeError: injected failure", failure), failure


def test_version_and_missing_paths_exit_non_zero(tmp_path):
    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"trainkit {trainkit.__version__}"
    code, _, err = cli("runs", str(tmp_path / "nowhere"))
    assert code == 2 and "no storage path" in err
    code, _, err = cli("plot", str(tmp_path / "nope"), "--metric", "loss")
    assert code == 2 and "no reports in" in err


def test_plot_by_step_and_time_marks_deleted_checkpoints_the_best_and_restarts(tmp_path):
    marker = tmp_path / "failed-once"
    trainkit.DataParallelTrainer(
        fail_once_fn, train_loop_config={"marker": str(marker)}, scaling_config=ScalingConfig(num_workers=0),
        run_config=trainkit.RunConfig(name="kept", storage_path=str(tmp_path), verbose=0,
                                      checkpoint_config=trainkit.CheckpointConfig(num_to_keep=2),
                                      failure_config=FailureConfig(max_failures=1))).fit()
    for x in ("step", "time"):
        out = tmp_path / f"by-{x}.png"
        code, stdout, stderr = cli("plot", str(tmp_path / "kept"), "--metric", "val_loss", "--metric", "accuracy",
                                   "--x", x, "-o", str(out), "--json")
        assert code == 0, stderr
        drawn = json.loads(stdout)
        assert drawn["x"] == x and drawn["restarts_at"] == [2]
        assert drawn["deleted_checkpoints"] == ["checkpoint_000000", "checkpoint_000001"]
        # the best among the checkpoints that still exist: val_loss 0.4 (min), accuracy 0.8 (max)
        assert drawn["best"] == {"val_loss": "checkpoint_000003", "accuracy": "checkpoint_000003"}
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, _, err = cli("plot", str(tmp_path / "kept"), "--metric", "accuracy", "--x", "epoch")
    assert code == 2 and "invalid choice: 'epoch'" in err


def test_show_gives_where_the_start_went(ray_cluster, run_config):
    result = trainkit.DataParallelTrainer(lambda: trainkit.report({"x": 1}), scaling_config=ScalingConfig(num_workers=1),
                                          run_config=run_config()).fit()
    code, text, _ = cli("show", result.path)
    assert code == 0
    (line,) = [line for line in text.splitlines() if line.startswith("start ")]
    assert [part for part in line.split()[1::2]] == ["ray_start", "placement", "actors", "setup", "backend",
                                                     "launch", "first_report"]  # in the order they happen


def test_end_of_run_summary_agrees_with_show_and_has_no_padding(tmp_path, capsys):
    """A run that failed once, then re-run: the summary printed off a terminal counts the attempts and
    reports `trainkit show` counts; its lines, and the commands', carry no trailing padding."""
    for _ in range(2):
        trainkit.DataParallelTrainer(
            fail_once_fn, train_loop_config={"marker": str(tmp_path / "failed-once")},
            scaling_config=ScalingConfig(num_workers=0),
            run_config=trainkit.RunConfig(name="twice", storage_path=str(tmp_path), verbose=1,
                                          failure_config=FailureConfig(max_failures=1))).fit()
    lines = capsys.readouterr().err.splitlines()
    summary = dict(line.split(None, 1) for line in lines[max(i for i, line in enumerate(lines) if "trainkit run" in line) + 1:])
    code, out, _ = cli("show", str(tmp_path / "twice"), "--json")
    shown = json.loads(out)
    assert (int(summary["attempts"]), int(summary["reports"])) == (shown["attempts"], shown["reports"]), summary
    for command in (("show", str(tmp_path / "twice")), ("runs", str(tmp_path)), ("plugins",)):
        lines += cli(*command)[1].splitlines()
    assert not [line for line in lines if line != line.rstrip()], lines
