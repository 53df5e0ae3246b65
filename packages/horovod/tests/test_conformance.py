"""trainkit-horovod against trainkit.testing's conformance suite: the all-gather goes through Horovod's
own Gloo collectives."""

import pytest
import torch

from trainkit.testing import NOT_PROVIDED, BackendConformance

pytest.importorskip("horovod", reason="Horovod is built, not pip-installed: nox -t horovod runs these")
from trainkit_horovod import HorovodConfig  # noqa: E402


def _hvd():
    import horovod.torch as hvd

    hvd.init()  # a no-op once initialized
    return hvd


def framework_rank() -> int:
    return _hvd().rank()


def all_gather(value: float) -> list[float]:
    return [float(v) for v in _hvd().allgather(torch.tensor([value], dtype=torch.float64))]  # by call order


def is_initialized() -> bool:
    import horovod.torch as hvd

    # Only Horovod itself: its HOROVOD_* variables are set with worker_group.set_env, which core
    # undoes when the group shuts down, after on_shutdown.
    return hvd.is_initialized()


class TestHorovodBackend(BackendConformance):
    backend_config = HorovodConfig()
    simulated_nodes = False  # gloo binds the interface holding the node's address: 127.0.0.2 is on none
    framework_modules = ("horovod", "torch")
    framework_rank = staticmethod(framework_rank)
    all_gather = staticmethod(all_gather)
    is_initialized = staticmethod(is_initialized)
    shard = NOT_PROVIDED("trainkit-horovod has no data helper: Horovod programs shard with their framework's sampler")
    report_callback = NOT_PROVIDED("trainkit-horovod has no report callback: the training function calls trainkit.report")
    journey = NOT_PROVIDED("not written for trainkit-horovod yet (issue 57 follow-up): a DistributedOptimizer run")
