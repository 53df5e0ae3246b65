"""trainkit.shard: contiguous, disjoint parts that cover the data, for arrays, frames and lists."""

import numpy as np
import pandas as pd
import pytest

import trainkit


@pytest.mark.parametrize("data", [np.arange(10), pd.DataFrame({"a": range(10)}), list(range(10))],
                         ids=["numpy", "pandas", "list"])
def test_parts_are_contiguous_disjoint_and_cover_the_data(data):
    parts = [trainkit.shard(data, rank, 3) for rank in range(3)]
    values = [list(p["a"]) if isinstance(p, pd.DataFrame) else list(p) for p in parts]
    assert values == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]


def test_bad_shards_are_refused():
    with pytest.raises(ValueError, match="fewer than the 4 workers"):
        trainkit.shard([1, 2, 3], 0, 4)
    with pytest.raises(ValueError, match="rank=2 is invalid"):
        trainkit.shard([1, 2, 3], 2, 2)
    with pytest.raises(RuntimeError, match=r"trainkit.shard\(\) can only be called inside a training function"):
        trainkit.shard([1, 2, 3])
