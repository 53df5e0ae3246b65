"""trainkit-horovod against trainkit.testing's conformance suite: the sum goes through Horovod's
own Gloo all-reduce."""

import pytest
import torch

from trainkit.testing import BackendConformance

pytest.importorskip("horovod", reason="Horovod is built, not pip-installed: nox -t horovod runs these")
from trainkit_horovod import HorovodConfig  # noqa: E402


def all_reduce_sum(value: float) -> float:
    import horovod.torch as hvd

    hvd.init()  # a no-op once initialized
    return hvd.allreduce(torch.tensor([value]), op=hvd.Sum).item()  # unnamed: matched by call order


class TestHorovodBackend(BackendConformance):
    backend_config = HorovodConfig()
    framework_modules = ("horovod", "torch")
    all_reduce_sum = staticmethod(all_reduce_sum)
