"""``normalize_pandas_for_lightgbm``: Arrow-backed pandas columns as LightGBM accepts them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["normalize_pandas_for_lightgbm"]


def normalize_pandas_for_lightgbm(df: "pd.DataFrame") -> "pd.DataFrame":
    """``df`` with its Arrow-backed integer, float and boolean columns (``int64[pyarrow]``, which
    ``Dataset.to_pandas()`` of Ray Data returns and ``lightgbm.Dataset`` refuses) as pandas'
    nullable NumPy dtypes (``Int64``, ``Float64``, ``boolean``). Other columns keep their buffers.

    Example::

        frame = normalize_pandas_for_lightgbm(shard.materialize().to_pandas())
        train_set = lightgbm.Dataset(frame.drop(columns="y"), label=frame["y"])
    """
    import pandas as pd
    import pyarrow as pa

    dtypes = {}
    for column, dtype in df.dtypes.items():
        if not isinstance(dtype, pd.ArrowDtype):
            continue
        arrow = dtype.pyarrow_dtype
        if pa.types.is_boolean(arrow):
            dtypes[column] = "boolean"
        elif pa.types.is_integer(arrow):
            dtypes[column] = f"{'Int' if pa.types.is_signed_integer(arrow) else 'UInt'}{arrow.bit_width}"
        elif pa.types.is_floating(arrow):
            dtypes[column] = f"Float{arrow.bit_width}"
    return df.astype(dtypes) if dtypes else df
