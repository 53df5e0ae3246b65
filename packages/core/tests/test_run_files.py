"""The files of a run directory: strict JSON every standard tool reads, a metrics log that ends
with a whole line after a full disk, a bounded run_state.json, and one best checkpoint for every
reader (the summary, `trainkit show`, `trainkit runs`, `Result`)."""

import json
import math
import os
import subprocess
import sys

import pytest

import trainkit
from trainkit import CheckpointConfig, FailureConfig, ScalingConfig
from trainkit.testing.steps import report_step, resume_step


def cli(*args, **env):
    out = subprocess.run([sys.executable, "-m", "trainkit.cli", *args], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env})
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
    from trainkit._internal.metrics_log import MetricsLog, read_metrics_log
    from trainkit._internal.retry import StorageError
    from trainkit._internal.storage import RunStorage

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
