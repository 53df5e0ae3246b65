"""trainkit-jax against trainkit.testing's conformance suites (2 CPU processes, gloo collectives)."""

import numpy as np

from trainkit.testing import NOT_PROVIDED, BackendConformance, CheckpointConformance
from trainkit_jax import JaxCheckpointIO, JaxConfig


def framework_rank() -> int:
    import jax

    return jax.process_index()


def all_gather(value: float) -> list[float]:
    """JAX's own cross-process collective, stacked in process order."""
    from jax.experimental import multihost_utils

    return [float(v) for v in np.asarray(multihost_utils.process_allgather(np.array([value]))).reshape(-1)]


def is_initialized() -> bool:
    import jax

    if hasattr(jax.distributed, "is_initialized"):  # JAX >= 0.4.36
        return jax.distributed.is_initialized()
    from jax._src import distributed

    return distributed.global_state.client is not None


class TestJaxBackend(BackendConformance):
    backend_config = JaxConfig()
    framework_modules = ("jax", "jaxlib")
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
    shard = NOT_PROVIDED("trainkit-jax has no data helper: a JAX program shards its own arrays")
    report_callback = NOT_PROVIDED("JAX has no training-loop callback: the training function calls trainkit.report")
    journey = NOT_PROVIDED("not written for trainkit-jax yet (issue 57 follow-up): a run through JaxCheckpointIO and restore")


class TestJaxCheckpointIO(CheckpointConformance):
    checkpoint_io = JaxCheckpointIO()
    resume = NOT_PROVIDED("not written for trainkit-jax yet (issue 57 follow-up): restore")

    def make_state(self, seed):
        import jax.numpy as jnp

        return {"params": {"w": jnp.arange(6.0).reshape(2, 3) + seed, "b": jnp.zeros(3)},
                "opt": ({"count": jnp.array(7)}, None), "layers": [1, 2.5, "relu", True], "step": 3}

    def assert_same(self, loaded, saved):
        assert np.array_equal(loaded["params"]["w"], saved["params"]["w"])
        assert loaded["params"]["w"].dtype == saved["params"]["w"].dtype
        assert int(loaded["opt"][0]["count"]) == 7 and loaded["opt"][1] is None and isinstance(loaded["opt"], tuple)
        assert loaded["layers"] == [1, 2.5, "relu", True] and loaded["step"] == 3
