"""Conformance suites a plugin's tests subclass: the checks every backend and checkpoint helper
must pass, run with real Ray workers.

Example (in a plugin's ``tests/test_conformance.py``, with ``pytest_plugins = ["trainkit.testing"]``
in its ``conftest.py``)::

    from trainkit.testing import BackendConformance, CheckpointConformance

    def all_reduce_sum(value: float) -> float:      # runs on every worker, inside the training fn
        tensor = torch.tensor([value])
        torch.distributed.all_reduce(tensor)
        return tensor.item()

    class TestTorchBackend(BackendConformance):
        backend_config = TorchConfig()
        all_reduce_sum = staticmethod(all_reduce_sum)

    class TestTorchCheckpointIO(CheckpointConformance):
        checkpoint_io = TorchCheckpointIO()

        def make_state(self):
            return {"w": torch.arange(4.0)}

        def assert_same(self, loaded, saved):
            assert torch.equal(loaded["w"], saved["w"])
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Callable, ClassVar

import pytest

import trainkit
from trainkit import (BackendConfig, Checkpoint, CheckpointCorruptError, CheckpointIO, DataParallelTrainer,
                      ScalingConfig, TrainingFailedError)

__all__ = ["BackendConformance", "CheckpointConformance"]

_GUARDS = pytest.mark.usefixtures("ray_cluster", "no_leaked_env", "no_leaked_threads", "no_leaked_processes")


class _Collect(trainkit.UserCallback):
    """Every rank's metrics of every report, in the driver."""

    def __init__(self) -> None:
        self.reports: list[list[dict[str, Any]]] = []

    def after_report(self, run_context, metrics, checkpoint) -> None:
        self.reports.append(metrics)


def _identity_fn(config: dict) -> None:
    ctx = trainkit.get_context()
    trainkit.report({"world_rank": ctx.get_world_rank(), "local_rank": ctx.get_local_rank(),
                     "node_rank": ctx.get_node_rank(), "world_size": ctx.get_world_size(),
                     "local_world_size": ctx.get_local_world_size()})


def _all_reduce_fn(config: dict) -> None:
    all_reduce_sum = config["all_reduce_sum"]
    rank, size = trainkit.get_context().get_world_rank(), trainkit.get_context().get_world_size()
    total = all_reduce_sum(float(rank + 1))
    # A second round proves every rank, not just rank 0, got the right sum.
    agreed = all_reduce_sum(1.0 if total == size * (size + 1) / 2 else 0.0)
    trainkit.report({"total": total, "agreed": agreed})


def _failing_fn(config: dict) -> None:
    config["all_reduce_sum"](1.0)  # the backend is up and communicating before the failure
    rank = trainkit.get_context().get_world_rank()
    if rank == config["failing_rank"]:
        raise ValueError(f"conformance: rank {rank} fails on purpose")
    trainkit.report({"rank": rank})


class BackendConformance:
    """What every backend must do on real Ray workers. Subclass it as ``Test<Name>Backend`` and set:

    ``backend_config``  an instance of the plugin's ``BackendConfig``
    ``all_reduce_sum``  a staticmethod ``(value: float) -> float`` that sums ``value`` over all ranks
                        with the framework's own collective; runs inside the training function.
    ``framework_modules``  the framework's top-level modules, which loading plugins and importing
                        the plugin's package must not import (e.g. ``("torch",)``).

    Every test also fails when it leaves environment variables, threads or processes behind in
    the driver. Override ``trainer`` if the plugin's trainer needs more than a backend config.
    """

    backend_config: ClassVar[BackendConfig]
    framework_modules: ClassVar[tuple[str, ...]] = ()
    num_workers: ClassVar[int] = 2

    @staticmethod
    def all_reduce_sum(value: float) -> float:
        raise NotImplementedError("set all_reduce_sum = staticmethod(...) in your conformance class")

    def trainer(self, train_fn: Callable, run_config: trainkit.RunConfig,
                config: dict | None = None) -> DataParallelTrainer:
        return DataParallelTrainer(train_fn, train_loop_config=config, backend_config=self.backend_config,
                                   scaling_config=ScalingConfig(num_workers=self.num_workers), run_config=run_config)

    def _fit(self, train_fn: Callable, run_config: Callable[..., trainkit.RunConfig],
             **config: Any) -> list[list[dict]]:
        collect = _Collect()
        config["all_reduce_sum"] = type(self).all_reduce_sum
        self.trainer(train_fn, run_config(callbacks=[collect]), config).fit()
        return collect.reports

    def test_loading_plugins_imports_no_framework(self) -> None:
        assert self.framework_modules, "set framework_modules to the framework's top-level modules, e.g. ('torch',)"
        package = type(self.backend_config).__module__.split(".")[0]
        code = (f"import json, sys, trainkit, {package}\n"
                "from trainkit._internal.plugins import get_plugins\n"
                "plugins = get_plugins()\n"
                "print(json.dumps({'imported': sorted(m for m in %r if m in sys.modules),\n"
                "                  'registered': [e.config_cls.__name__ for e in plugins.backends.entries.values()],\n"
                "                  'problems': [i.reason for i in plugins.infos.values() if i.status == 'error']}))"
                % (self.framework_modules,))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        report = json.loads(out.stdout.strip().splitlines()[-1])
        assert report["imported"] == [], f"importing {package} and loading plugins imported {report['imported']}"
        assert type(self.backend_config).__name__ in report["registered"], report
        assert report["problems"] == []

    @_GUARDS
    def test_ranks_and_world_size(self, run_config) -> None:
        (metrics,) = self._fit(_identity_fn, run_config)
        n = self.num_workers
        assert [m["world_rank"] for m in metrics] == list(range(n))
        assert all(m["world_size"] == n for m in metrics)
        assert sorted((m["node_rank"], m["local_rank"]) for m in metrics) == [(0, r) for r in range(n)]
        assert all(m["local_world_size"] == n for m in metrics)

    @_GUARDS
    def test_collective_communicates_across_workers(self, run_config) -> None:
        (metrics,) = self._fit(_all_reduce_fn, run_config)
        n = self.num_workers
        assert [m["total"] for m in metrics] == [n * (n + 1) / 2] * n
        assert [m["agreed"] for m in metrics] == [n] * n

    @_GUARDS
    def test_failure_on_one_rank_surfaces_with_its_rank(self, run_config) -> None:
        failing = self.num_workers - 1
        with pytest.raises(TrainingFailedError) as info:
            self._fit(_failing_fn, run_config, failing_rank=failing)
        assert info.value.rank == failing
        assert info.value.error_type == "ValueError"
        assert f"rank {failing} fails on purpose" in f"{info.value} {info.value.worker_traceback}"
        assert isinstance(info.value, trainkit.WorkerGroupError) and list(info.value.worker_failures) == [failing]

    @_GUARDS
    def test_shutdown_is_clean_and_repeatable(self, ray_cluster, run_config) -> None:
        for _ in range(2):  # a second group on the same cluster sets the framework up again
            (metrics,) = self._fit(_all_reduce_fn, run_config)
            assert [m["agreed"] for m in metrics] == [self.num_workers] * self.num_workers
            _assert_resources_released(ray_cluster)


def _assert_resources_released(ray: Any, timeout_s: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while (free := ray.available_resources().get("CPU", 0)) < (total := ray.cluster_resources()["CPU"]):
        if time.monotonic() > deadline:
            raise AssertionError(f"{total - free} CPUs still held {timeout_s}s after fit() returned")
        time.sleep(0.05)


def _save_and_report_fn(config: dict) -> None:
    io: CheckpointIO = config["checkpoint_io"]
    io.report({"rank": trainkit.get_context().get_world_rank()}, config["state"])  # rank 0 saves


def _fit_two(train_fn: Callable, config: dict, run_config: trainkit.RunConfig) -> trainkit.Result:
    return DataParallelTrainer(train_fn, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                               run_config=run_config).fit()


def _resume_fn(config: dict) -> None:
    checkpoint = trainkit.get_checkpoint()
    assert checkpoint is not None, "the resumed run got no checkpoint"
    config["assert_same"](config["checkpoint_io"].load(checkpoint), config["state"])
    trainkit.report({"resumed": 1})


class CheckpointConformance:
    """What every ``CheckpointIO`` must do. Subclass it as ``Test<Name>CheckpointIO`` and set
    ``checkpoint_io``; override ``make_state`` (an example of the framework's state) and
    ``assert_same`` (raises unless a loaded state equals the saved one)."""

    checkpoint_io: ClassVar[CheckpointIO]

    def make_state(self) -> Any:
        raise NotImplementedError("return an example state of your framework from make_state()")

    def assert_same(self, loaded: Any, saved: Any) -> None:
        assert loaded == saved

    def test_round_trip_in_process(self, tmp_path) -> None:
        state = self.make_state()
        self.checkpoint_io.save(state, str(tmp_path))
        assert os.listdir(tmp_path), "save() wrote no file"
        assert not any(name.startswith(".") for name in os.listdir(tmp_path)), "dot files are trainkit's own"
        self.assert_same(self.checkpoint_io.load(Checkpoint.from_directory(tmp_path)), state)

    @_GUARDS
    def test_round_trip_through_a_run_and_resume(self, run_config) -> None:
        config = {"checkpoint_io": self.checkpoint_io, "state": self.make_state(), "assert_same": self.assert_same}
        rc = run_config()
        result = _fit_two(_save_and_report_fn, config, rc)
        self.assert_same(self.checkpoint_io.load(result.checkpoint), config["state"])
        resumed = _fit_two(_resume_fn, config, run_config(name=rc.name, storage_path=rc.storage_path))
        assert resumed.metrics == {"resumed": 1}

    @_GUARDS
    def test_altered_file_is_refused(self, run_config) -> None:
        config = {"checkpoint_io": self.checkpoint_io, "state": self.make_state()}
        result = _fit_two(_save_and_report_fn, config, run_config())
        path = result.checkpoint.path
        victim = next(os.path.join(path, n) for n in sorted(os.listdir(path)) if not n.startswith("."))
        with open(victim, "r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]) if first else b"x")
        with pytest.raises(CheckpointCorruptError):
            self.checkpoint_io.load(result.checkpoint)
