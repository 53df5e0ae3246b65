"""The files of a run directory: strict JSON every standard tool reads, a metrics log that ends
with a whole line after a full disk, a bounded run_state.json, and one best checkpoint for every
reader (the summary, `trainkit show`, `trainkit runs`, `Result`)."""

import json
import math
import os
import subprocess
import sys

import pyarrow.fs as pafs
import pytest
import trainkit
from trainkit import CheckpointConfig, FailureConfig, ScalingConfig
from trainkit.testing import subprocesses
from trainkit.testing.faultfs import FaultyHandler
from trainkit.testing.steps import report_step, resume_step


def cli(*args, **env):
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", *args], capture_output=True, text=True,
                           timeout=120, env={**os.environ, **env})
    return out.returncode, out.stdout, out.stderr


def fit(fn, tmp_path, name, config=None, checkpoint_config=None, verbose=0, max_failures=0):
    return trainkit.DataParallelTrainer(
        fn, train_loop_config=config or {}, scaling_config=ScalingConfig(num_workers=0),
        run_config=trainkit.RunConfig(name=name, storage_path=str(tmp_path), verbose=verbose,
                                      checkpoint_config=checkpoint_config or CheckpointConfig(),
                                      failure_config=FailureConfig(max_failures=max_failures))).fit()


def _reject(constant):
    raise ValueError(f"bare {constant} is not JSON (RFC 8259)")


def strict_load(text):
    return json.loads(text, parse_constant=_reject)


def non_finite_fn(config):
    for step in range(resume_step(), 3):
        report_step(step, {"step": step, "loss": [math.nan, math.inf, -math.inf][step],
                           "nested": {"grad_norm": [math.inf, 1.0, math.nan][step]}, "label": "NaN"})


def test_every_file_is_strict_json_and_non_finite_values_round_trip(tmp_path):
    result = fit(non_finite_fn, tmp_path, "nan")
    run = tmp_path / "nan"
    files = [p for p in run.rglob("*") if p.is_file() and (p.suffix in (".json", ".jsonl", ".prev"))]
    assert {p.name for p in files} >= {"metrics.jsonl", "run_state.json", ".manifest.json"}
    for path in files:
        text = path.read_text()
        lines = text.splitlines() if path.suffix == ".jsonl" else [text]
        for line in lines:
            strict_load(line)  # raises on a bare NaN/Infinity
        jq = subprocess.run(["jq", "-c", "."], input=text, capture_output=True, text=True)
        assert jq.returncode == 0, f"jq rejects {path.name}: {jq.stderr}"
    # the documented encoding reads back as floats wherever trainkit reads
    assert math.isinf(result.metrics["loss"]) and result.metrics["loss"] < 0
    frame = trainkit.Result.from_path(str(run)).metrics_dataframe
    assert math.isnan(frame["loss"][0]) and frame["loss"][1] == math.inf and frame["loss"][2] == -math.inf
    assert list(frame["label"]) == ["NaN"] * 3  # a string stays a string
    code, out, err = cli("show", str(run), "--json")
    assert code == 0, err
    shown = strict_load(out)  # `trainkit show --json | jq` works too, in the same documented encoding
    assert shown["last_metrics"]["loss"] == {"$float": "-Infinity"}
    assert shown["last_metrics"]["nested"]["grad_norm"] == {"$float": "NaN"}
    code, text, _ = cli("show", str(run))
    assert "loss=-inf" in text


@pytest.fixture
def tiny_filesystem(tmp_path):
    """A 64 KiB tmpfs: a real full disk (ENOSPC from the kernel). Needs root, as tests/multihost does."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_leaves_the_metrics_log_ending_with_a_whole_line(tiny_filesystem):
    from trainkit._internal.storage.metrics_log import MetricsLog, read_metrics_log
    from trainkit._internal.storage.run_storage import RunStorage
    from trainkit.errors import StorageError

    storage = RunStorage(str(tiny_filesystem), "full")
    storage.fs.create_dir(storage.run_path)
    log = MetricsLog(storage)
    metrics = {f"m{i}": float(i) for i in range(300)}  # about 3.5 KiB a line: a page boundary cuts one
    index = 0
    with pytest.raises(StorageError) as failed:
        while index < 1000:
            log.append({"index": index, "attempt": 0, "time": 0.0, "checkpoint": None, "metrics": metrics})
            log.flush()
            index += 1
    assert "No space left" in str(failed.value)
    data = (tiny_filesystem / "full" / "metrics.jsonl").read_bytes()
    assert data.endswith(b"\n"), "the failed write left a torn last line"
    assert [strict_load(line)["index"] for line in data.splitlines()] == list(range(index))
    # a torn line a crash left (no chance to truncate) is cut off before the next append
    (tiny_filesystem / "full" / "metrics.jsonl").write_bytes(data[:1000] + b'{"index": 0, "tor')
    log._unwritten.clear()
    log.append({"index": 1, "attempt": 0, "time": 0.0, "checkpoint": None, "metrics": {"x": 1}})
    log.flush()
    assert (tiny_filesystem / "full" / "metrics.jsonl").read_bytes().endswith(b'"tor') is False
    assert [r["index"] for r in read_metrics_log(storage.fs, storage.run_path)][-1] == 1
    for line in (tiny_filesystem / "full" / "metrics.jsonl").read_bytes().splitlines():
        strict_load(line)


def ranked_fn(config):
    for step in range(resume_step(), 4):
        report_step(step, {"step": step, "val_accuracy": [0.5, 0.9, 0.7, 0.8][step], "loss": 1.0 / (step + 1)})


def test_every_reader_names_the_same_best_checkpoint_and_a_rerun_says_it_resumed(tmp_path, capfd):
    ranking = CheckpointConfig(num_to_keep=3, checkpoint_score_attribute="val_accuracy", checkpoint_score_order="max")
    result = fit(ranked_fn, tmp_path, "ranked", checkpoint_config=ranking, verbose=1)
    summary = capfd.readouterr().err
    best = "checkpoint_000001"  # val_accuracy 0.9; the latest is checkpoint_000003
    assert result.get_best_checkpoint().path.endswith(best)
    assert f"{best}  (val_accuracy=0.9)" in summary
    assert "resuming" not in summary  # a first run resumes nothing
    assert trainkit.Result.from_path(str(tmp_path / "ranked")).get_best_checkpoint().path.endswith(best)
    code, text, err = cli("show", str(tmp_path / "ranked"))
    assert code == 0, err
    assert [line for line in text.splitlines() if line.startswith("best ")] == [
        f"best         {best} (by val_accuracy, max: the run's checkpoint_score_attribute; --metric to choose)"]
    code, out, _ = cli("runs", str(tmp_path), "--json")
    (run,) = json.loads(out)
    assert (run["best_checkpoint"], run["best_by"]) == (best, "val_accuracy")
    assert f"{best} (val_accuracy)" in cli("runs", str(tmp_path))[1]
    # a re-run of the finished run: one line says it resumed, and from which checkpoint
    fit(ranked_fn, tmp_path, "ranked", checkpoint_config=ranking, verbose=1)
    resumed = [line for line in capfd.readouterr().err.splitlines() if "resum" in line]
    assert resumed == ["trainkit: resuming run 'ranked' (finished before) from checkpoint_000003, at report 4"]


def wide_fn(config):
    metrics = {f"metric_{i:05d}": float(i) for i in range(10_000)}
    for step in range(resume_step(), config["steps"]):
        report_step(step, {**metrics, "step": step, "score": float(step % 3)})


def test_run_state_stays_small_with_10000_key_reports_and_old_run_dirs_still_resume(tmp_path):
    ranking = CheckpointConfig(num_to_keep=4, checkpoint_score_attribute="score", checkpoint_score_order="max")
    fit(wide_fn, tmp_path, "wide", config={"steps": 8}, checkpoint_config=ranking)
    state_file = tmp_path / "wide" / "run_state.json"
    state = strict_load(state_file.read_text())
    assert state_file.stat().st_size < 10_000, state_file.stat().st_size  # 10,000-key reports: no metrics in it
    assert "last_metrics" not in state and all("metrics" not in c for c in state["checkpoints"])
    # retention ranked by the recorded scores (step % 3; ties: newer first): steps 5, 2, 7, 4 kept
    assert [(c["index"], c["score"]) for c in state["checkpoints"]] == [(2, 2.0), (4, 1.0), (5, 2.0), (7, 1.0)]
    result = trainkit.Result.from_path(str(tmp_path / "wide"))
    assert len(result.best_checkpoints[0][1]) == 10_002  # the metrics, read from the manifests
    assert result.metrics["step"] == 7 and len(result.metrics) == 10_002  # metrics.jsonl's last line
    assert result.get_best_checkpoint().path.endswith("checkpoint_000005")
    code, out, err = cli("show", str(tmp_path / "wide"), "--json")
    assert code == 0 and len(json.loads(out)["checkpoints"][0]["metrics"]) == 10_002, err

    # a run directory the previous version wrote (format 1: every checkpoint's metrics in run_state)
    old = dict(state, format=1, last_metrics={"step": 7}, checkpoints=[
        {"name": c["name"], "index": c["index"], "attempt": c["attempt"],
         "metrics": {"step": c["index"], "score": c["score"]}} for c in state["checkpoints"]])
    for key in ("checkpoint_score_attribute", "checkpoint_score_order"):
        old.pop(key)
    state_file.write_text(json.dumps(old))
    read_back = trainkit.Result.from_path(str(tmp_path / "wide"))
    assert [m for _, m in read_back.best_checkpoints][0] == {"step": 2, "score": 2.0}  # as the old state holds them
    assert read_back.metrics == {"step": 7}
    resumed = fit(wide_fn, tmp_path, "wide", config={"steps": 10}, checkpoint_config=ranking)
    assert resumed.metrics["step"] == 9
    steps = [r["step"] for r in resumed.metrics_dataframe.to_dict("records")]
    assert steps == list(range(10)), steps  # resumed after step 7: nothing trained twice
    assert all("metrics" not in c for c in strict_load(state_file.read_text())["checkpoints"])


def test_show_of_a_missing_run_points_to_runs_and_plot_says_no_restarts(tmp_path):
    code, _, err = cli("show", "nosuch", TRAINKIT_STORAGE_PATH=str(tmp_path))
    assert code == 2 and "no trainkit run at 'nosuch'" in err and "`trainkit runs` lists the runs" in err
    fit(ranked_fn, tmp_path, "plain")
    code, out, err = cli("plot", str(tmp_path / "plain"), "--metric", "loss", "-o", str(tmp_path / "loss.png"))
    assert code == 0, err
    assert out.strip().endswith("4 checkpoints (0 deleted), no restarts") and "none" not in out


class ManifestReads(FaultyHandler):
    """The local disk, counting reads of each checkpoint's manifest."""

    def __init__(self):
        super().__init__(write_errors=[])
        self.reads: dict[str, int] = {}

    def open_input_stream(self, path):
        folder, name = path.split("/")[-2:]
        if name == ".manifest.json" and folder.startswith("checkpoint_"):
            self.reads[folder] = self.reads.get(folder, 0) + 1
        return super().open_input_stream(path)


@pytest.mark.filterwarnings("ignore:PyFileSystem has no atomic create-if-absent")  # the lock's, on this stand-in
def test_a_resumed_run_reads_each_manifest_once_to_sweep_and_once_to_reconcile(tmp_path):
    """At the start, a resumed run sweeps its directory once (on an object store: a listing and
    every manifest read): RunState.recover sweeps, and the first attempt does not sweep again."""
    handler = ManifestReads()
    filesystem = pafs.PyFileSystem(handler)

    def run(fn):
        return trainkit.DataParallelTrainer(
            fn, scaling_config=ScalingConfig(num_workers=0),
            run_config=trainkit.RunConfig(name="resumed", storage_path=str(tmp_path), storage_filesystem=filesystem,
                                          verbose=0)).fit()

    run(lambda config: [report_step(step, {"step": step}) for step in range(3)])
    handler.reads.clear()
    at_start = {}
    run(lambda config: at_start.update(handler.reads))
    assert sorted(at_start) == ["checkpoint_000000", "checkpoint_000001", "checkpoint_000002"]
    # one sweep and one reconciliation each; the checkpoint resumed from is verified once more
    assert at_start == {"checkpoint_000000": 2, "checkpoint_000001": 2, "checkpoint_000002": 3}, at_start


def test_metrics_dataframe_never_replaces_a_metric_named_like_its_own_columns(tmp_path):
    """A metric named ``attempt`` (or ``timestamp``, ``checkpoint``, ``report_index``, or the
    prefixed name as well) keeps its name and values; trainkit's column about the report moves aside."""
    pytest.importorskip("pandas")

    def fn():
        for step in range(3):
            trainkit.report({"attempt": f"user-{step}", "timestamp": step * 10, "trainkit_timestamp": -step,
                             "loss": 1.0 / (step + 1)})

    result = trainkit.DataParallelTrainer(fn, scaling_config=trainkit.ScalingConfig(num_workers=0),
                                          run_config=trainkit.RunConfig(name="clash", storage_path=str(tmp_path),
                                                                        verbose=0)).fit()
    frame = result.metrics_dataframe
    assert list(frame["attempt"]) == ["user-0", "user-1", "user-2"]
    assert list(frame["timestamp"]) == [0, 10, 20] and list(frame["trainkit_timestamp"]) == [0, -1, -2]
    assert list(frame["trainkit_attempt"]) == [0, 0, 0] and list(frame["report_index"]) == [0, 1, 2]
    assert all(t > 1e9 for t in frame["trainkit_trainkit_timestamp"])  # the report's own time, UNIX seconds
    assert list(frame["checkpoint"]) == [None, None, None]
