import math

import numpy as np
import pytest

from trainkit._internal.metrics import validate_metrics


def test_plain_values_pass_and_nan_is_kept():
    out = validate_metrics({"loss": float("nan"), "step": 3, "tag": "a", "ok": True, "none": None,
                            "nested": {"acc": [0.5, 0.6]}})
    assert math.isnan(out["loss"]) and out["nested"] == {"acc": [0.5, 0.6]}


def test_scalars_are_converted():
    out = validate_metrics({"a": np.float32(0.5), "b": np.int64(3), "c": np.array([2.0])})
    assert out == {"a": 0.5, "b": 3, "c": 2.0}
    assert type(out["a"]) is float and type(out["b"]) is int


@pytest.mark.parametrize("bad, path", [
    ({"s": {1, 2}}, "metrics['s']"),
    ({"b": b"x"}, "metrics['b']"),
    ({"o": object()}, "metrics['o']"),
    ({"deep": {"x": [1, np.zeros(3)]}}, "metrics['deep']['x'][1]"),
    ({1: 2}, "metrics: key 1"),
])
def test_rejected_with_key_path(bad, path):
    with pytest.raises(ValueError) as info:
        validate_metrics(bad)
    assert str(info.value).startswith(path)


def test_limits():
    with pytest.raises(ValueError, match="exceeds"):
        validate_metrics({"big": "x" * (2 << 20)})
    deep: dict = {}
    node = deep
    for _ in range(100):
        node["d"] = {}
        node = node["d"]
    with pytest.raises(ValueError, match="deeper"):
        validate_metrics(deep)
    with pytest.raises(ValueError, match="must be a dict"):
        validate_metrics([1])
