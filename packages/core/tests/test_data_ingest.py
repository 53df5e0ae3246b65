"""Ray Data ingest on real workers: every row reaches exactly one rank per epoch, datasets not
split reach every rank whole, factories are rebuilt for each attempt."""

import sys

import numpy as np
import pandas as pd
import pytest

import trainkit
from trainkit import DataConfig, DataParallelTrainer, FailureConfig, ScalingConfig
from trainkit.testing import subprocesses

ray_data = pytest.importorskip("ray.data", reason="Ray Data is trainkit's 'data' extra")

ROWS = 1000
TWO = ScalingConfig(num_workers=2)


class Recorder(trainkit.UserCallback):
    def __init__(self):
        self.reports = []  # per report: every rank's metrics

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append(metrics)


def read_ids(config):
    """Each epoch: iterate every named shard and report the ids seen, per dataset."""
    shards = {name: trainkit.get_dataset_shard(name) for name in config["names"]}
    for epoch in range(config.get("epochs", 2)):
        seen = {name: [int(i) for batch in shard.iter_batches(batch_size=64, batch_format="numpy")
                       for i in batch["id"]] for name, shard in shards.items()}
        trainkit.report({"epoch": epoch, "ids": seen})


def fit(run_config, datasets, names, **kwargs):
    recorder = Recorder()
    DataParallelTrainer(read_ids, train_loop_config={"names": names, **kwargs.pop("config", {})},
                        scaling_config=kwargs.pop("scaling_config", TWO), datasets=datasets,
                        run_config=run_config(callbacks=[recorder], **kwargs.pop("run", {})), **kwargs).fit()
    return recorder.reports


def assert_exactly_once(reports, name, label):
    assert len(reports) == 2, reports  # 2 epochs
    for epoch, ranks in enumerate(reports):
        per_rank = [r["ids"][name] for r in ranks]
        seen = [i for ids in per_rank for i in ids]
        duplicates = len(seen) - len(set(seen))
        print(f"{label} epoch {epoch}: {len(seen)} rows, "
              + ", ".join(f"rank{r} {len(ids)}" for r, ids in enumerate(per_rank)) + f", duplicates {duplicates}")
        assert duplicates == 0
        assert set(seen) == set(range(ROWS))
        assert all(per_rank) and not set(per_rank[0]) & set(per_rank[1])


def frame(start=0, stop=ROWS):
    return pd.DataFrame({"id": np.arange(start, stop), "x": np.arange(start, stop, dtype=np.float32) / ROWS})


def test_pandas_pipeline_split_exactly_once(ray_cluster, run_config):
    chunks = [frame(start, start + 250) for start in range(0, ROWS, 250)]
    ds = ray_data.from_pandas(chunks).map_batches(lambda b: {"id": b["id"], "x2": b["x"] * 2})
    assert_exactly_once(fit(run_config, {"train": ds}, ["train"]), "train", "pandas")


def test_numpy_split_exactly_once(ray_cluster, run_config):
    ds = ray_data.from_numpy(np.arange(ROWS)).repartition(7).map(lambda row: {"id": row["data"]})
    assert_exactly_once(fit(run_config, {"train": ds}, ["train"]), "train", "numpy")


def test_parquet_split_and_whole_eval(ray_cluster, run_config, tmp_path):
    """datasets_to_split=["train"]: train is sharded, eval reaches every rank whole."""
    for part, start in enumerate(range(0, ROWS, 200)):
        frame(start, start + 200).to_parquet(tmp_path / f"part-{part}.parquet")
    train = ray_data.read_parquet(str(tmp_path))
    evaluation = ray_data.from_pandas(frame())
    reports = fit(run_config, {"train": train, "eval": evaluation}, ["train", "eval"],
                  dataset_config=DataConfig(datasets_to_split=["train"]))
    assert_exactly_once(reports, "train", "parquet")
    for ranks in reports:
        for metrics in ranks:
            assert sorted(metrics["ids"]["eval"]) == list(range(ROWS))


def test_factory_rebuilt_for_each_attempt(ray_cluster, run_config):
    built = []

    def make_train():
        built.append(len(built))
        return ray_data.from_pandas([frame(0, 500), frame(500, ROWS)])

    def fail_first_attempt(config):
        if trainkit.get_context().get_attempt() == 0:
            raise RuntimeError("injected failure")
        read_ids(config)

    recorder = Recorder()
    result = DataParallelTrainer(fail_first_attempt, train_loop_config={"names": ["train"]}, scaling_config=TWO,
                                 datasets={"train": make_train},
                                 run_config=run_config(callbacks=[recorder],
                                                       failure_config=FailureConfig(max_failures=1))).fit()
    assert result.error is None
    assert built == [0, 1]  # once per attempt
    assert_exactly_once(recorder.reports, "train", "retried")


def test_local_mode_reads_every_row(ray_cluster, run_config):
    reports = fit(run_config, {"train": ray_data.range(ROWS)}, ["train"], scaling_config=ScalingConfig(num_workers=0))
    assert [sorted(r[0]["ids"]["train"]) for r in reports] == [list(range(ROWS))] * 2


def test_execution_options_apply_to_the_shard(ray_cluster, run_config):
    options = ray_data.ExecutionOptions(preserve_order=True)
    reports = fit(run_config, {"train": ray_data.range(ROWS)}, ["train"],
                  dataset_config=DataConfig(execution_options={"train": options}))
    assert_exactly_once(reports, "train", "options")


def test_bad_inputs_name_the_field():
    ds = ray_data.range(10)
    with pytest.raises(ValueError, match=r"datasets_to_split names \['eval'\].*\['train'\]"):
        DataParallelTrainer(read_ids, datasets={"train": ds}, dataset_config=DataConfig(datasets_to_split=["eval"]))
    with pytest.raises(TypeError, match=r"datasets\['meta'\] is a dict, not a ray.data.Dataset"):
        DataParallelTrainer(read_ids, datasets={"train": ds, "meta": {}},
                            dataset_config=DataConfig(datasets_to_split=["train", "meta"]))
    with pytest.raises(TypeError, match="dataset_config must be a trainkit.DataConfig"):
        DataParallelTrainer(read_ids, datasets={"train": ds}, dataset_config={"datasets_to_split": "all"})
    with pytest.raises(ValueError, match="datasets_to_split='train' is invalid: expected 'all' or a list"):
        DataConfig(datasets_to_split="train")
    with pytest.raises(ValueError, match="execution_options=.*is invalid"):
        DataConfig(execution_options={"train": "fast"})


def test_ray_data_and_tune_are_imported_only_when_used():
    script = ("import sys, trainkit, trainkit.tune\n"
              "trainkit.DataParallelTrainer(lambda: None, datasets={'files': ['a', 'b']},\n"
              "                             dataset_config=trainkit.DataConfig())\n"
              "print(sorted(m for m in sys.modules if m.startswith(('ray.data', 'ray.tune'))))")
    out = subprocesses.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
