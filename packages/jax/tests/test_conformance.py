"""trainkit-jax against trainkit.testing's conformance suites (2 CPU processes, gloo collectives)."""

import numpy as np

from trainkit.testing import BackendConformance, CheckpointConformance
from trainkit_jax import JaxCheckpointIO, JaxConfig


def all_reduce_sum(value: float) -> float:
    """JAX's own cross-process collective."""
    from jax.experimental import multihost_utils

    return float(np.sum(multihost_utils.process_allgather(np.array([value]))))


class TestJaxBackend(BackendConformance):
    backend_config = JaxConfig()
    framework_modules = ("jax", "jaxlib")
    all_reduce_sum = staticmethod(all_reduce_sum)


class TestJaxCheckpointIO(CheckpointConformance):
    checkpoint_io = JaxCheckpointIO()

    def make_state(self):
        import jax.numpy as jnp

        return {"params": {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.zeros(3)},
                "opt": ({"count": jnp.array(7)}, None), "layers": [1, 2.5, "relu", True], "step": 3}

    def assert_same(self, loaded, saved):
        assert np.array_equal(loaded["params"]["w"], saved["params"]["w"])
        assert loaded["params"]["w"].dtype == saved["params"]["w"].dtype
        assert int(loaded["opt"][0]["count"]) == 7 and loaded["opt"][1] is None and isinstance(loaded["opt"], tuple)
        assert loaded["layers"] == [1, 2.5, "relu", True] and loaded["step"] == 3
