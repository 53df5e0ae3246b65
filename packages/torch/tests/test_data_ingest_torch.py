"""A Ray Data shard feeds a TorchTrainer's workers torch batches (``iter_torch_batches``)."""

import numpy as np
import pandas as pd
import pytest

import trainkit
from trainkit import ScalingConfig
from trainkit_torch import TorchTrainer

ray_data = pytest.importorskip("ray.data", reason="Ray Data is trainkit's 'data' extra")
ROWS = 1000


def count_torch_rows():
    import torch

    rows = 0
    for batch in trainkit.get_dataset_shard("train").iter_torch_batches(batch_size=100, dtypes=torch.float32):
        assert isinstance(batch["x"], torch.Tensor) and batch["x"].dtype == torch.float32
        rows += len(batch["x"])
    trainkit.report({"rows": rows})


class Recorder(trainkit.UserCallback):
    def after_report(self, run_context, metrics, checkpoint):
        self.metrics = metrics


def test_iter_torch_batches_splits_the_rows(ray_cluster, run_config):
    recorder = Recorder()
    data = ray_data.from_pandas(pd.DataFrame({"x": np.arange(ROWS, dtype=np.float32)}))
    TorchTrainer(count_torch_rows, scaling_config=ScalingConfig(num_workers=2), datasets={"train": data},
                 run_config=run_config(callbacks=[recorder])).fit()
    assert [m["rows"] for m in recorder.metrics] == [ROWS // 2, ROWS // 2]
