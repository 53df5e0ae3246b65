"""``BackendConformance``: what every backend must do on real Ray workers. The checks live by
concern in the mixins it is made of (packaging, Trainer, host); the rank, failure, teardown and
local-mode checks here."""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import pytest

import trainkit
from trainkit import BackendConfig, DataParallelTrainer, ScalingConfig, TrainingFailedError
from trainkit.testing._conformance.checks import _assert_resources_released, _check_ranks
from trainkit.testing._conformance.data_checks import DataChecks
from trainkit.testing._conformance.guards import GUARDS as _GUARDS
from trainkit.testing._conformance.guards import LOCAL_GUARDS as _LOCAL_GUARDS
from trainkit.testing._conformance.host_checks import HostChecks
from trainkit.testing._conformance.journey_checks import JourneyChecks
from trainkit.testing._conformance.metadata import _entry_for
from trainkit.testing._conformance.packaging_checks import PackagingChecks
from trainkit.testing._conformance.trainer_checks import TrainerChecks
from trainkit.testing._conformance.worker_fns import _Collect, _failing_fn, _local_fn, _ranks_fn


class BackendConformance(PackagingChecks, TrainerChecks, DataChecks, JourneyChecks, HostChecks):
    """What every backend must do on real Ray workers. Subclass it as ``Test<Name>Backend`` and set:

    ``backend_config``    an instance of the plugin's ``BackendConfig``
    ``framework_modules`` the framework's top-level modules, which loading plugins and importing the
                          plugin's package must not import (e.g. ``("torch",)``)

    and three staticmethods that ask the framework itself (they run on the workers):

    ``framework_rank() -> int``             this worker's rank as the framework numbers it
                                            (in the training function)
    ``all_gather(value) -> list[float]``    every rank's ``value`` in the framework's rank order,
                                            through the framework's own communication (in the
                                            training function, on every rank)
    ``is_initialized() -> bool``            whether the framework's communication (process group,
                                            communicator, cluster env) is set up in this worker
                                            process; run on every worker right after ``on_shutdown``

    Checks, on ``num_workers`` (2) workers: framework ranks match trainkit's and an all-gather
    arrives in rank order on every rank; a failure on one rank surfaces with its rank;
    ``on_shutdown`` leaves ``is_initialized()`` false on every worker and a second group sets up
    again; the Trainer the plugin registers, ``trainkit.Trainer(fn, backend=<name>)`` and local mode
    (``num_workers=0``) all fit. Then what breaks only beyond one test process (issue 45): ranks
    on two simulated nodes at 127.0.0.2 and 127.0.0.3 (no rank reaches the other node's through
    127.0.0.1; ``shard`` gives disjoint rows covering the data), two runs at once on one host, the
    registered Trainer keeping the user's ``RunConfig`` (a ``FailureConfig(max_failures=1)`` retry)
    and its own ``*_config`` keyword, every rank's report through ``report_callback`` reaching the
    driver, loading the plugin leaving the process's global state alone, and the framework declared
    with a lower bound and resolvable on the package index. Every test also fails when it leaves
    environment variables, threads or processes behind in the driver. Override ``trainer`` if the
    plugin's trainer needs more than a backend config.

    Hooks of the plugin's helpers (staticmethods). A probe whose hook is not set fails with the
    line to add; a plugin that truly has no such helper opts out, with the reason, as
    ``shard = NOT_PROVIDED("why")`` (the probe skips; the summary lists every opt-out):

    ``shard(rows) -> list``         the rows of ``rows`` this rank trains on, through the plugin's
                                    data helper (in the training function)
    ``report_callback(metrics)``    reports ``metrics`` through the plugin's report callback, as the
                                    framework calls it on every rank at a step's end
    """

    backend_config: ClassVar[BackendConfig]
    framework_modules: ClassVar[tuple[str, ...]] = ()
    num_workers: ClassVar[int] = 2
    #: ``shard(rows) -> rows``: the rows of ``rows`` this rank trains on, through the plugin's data
    #: helper (a sampler, a loader; in the training function). None: the data probe fails.
    shard: ClassVar[Callable[[list], list] | None] = None
    #: False skips ``test_ranks_on_two_nodes``, for a framework that binds by network interface name
    #: (``HOROVOD_GLOO_IFACE``): the simulated nodes' addresses (127.0.0.2, 127.0.0.3) are on no interface.
    simulated_nodes: ClassVar[bool] = True
    #: ``report_callback(metrics)``: report ``metrics`` (a dict of floats) through the plugin's report
    #: callback, as the framework calls it on every rank at the end of a step (in the training
    #: function). None: the probe fails.
    report_callback: ClassVar[Callable[[dict], None] | None] = None

    @staticmethod
    def framework_rank() -> int:
        raise NotImplementedError("set framework_rank = staticmethod(...) in your conformance class: "
                                  "this worker's rank as the framework reports it")

    @staticmethod
    def all_gather(value: float) -> list[float]:
        raise NotImplementedError("set all_gather = staticmethod(...) in your conformance class: every rank's value "
                                  "in rank order, through the framework's collective")

    @staticmethod
    def is_initialized() -> bool:
        raise NotImplementedError("set is_initialized = staticmethod(...) in your conformance class: whether the "
                                  "framework's communication is still set up in this worker process")

    @pytest.fixture
    def preimported_modules(self, preimported_modules: tuple[str, ...]) -> tuple[str, ...]:
        """The framework and the plugin's backend are imported before the env guard's snapshot: what
        they set in os.environ when imported is no leak, whichever test imports them first."""
        return (*preimported_modules, *self.framework_modules, type(self.backend_config).__module__,
                getattr(self.backend_config.backend_cls, "__module__", "trainkit"))

    def trainer(self, train_fn: Callable, run_config: trainkit.RunConfig,
                config: dict | None = None) -> DataParallelTrainer:
        return DataParallelTrainer(train_fn, train_loop_config=config, backend_config=self.backend_config,
                                   scaling_config=ScalingConfig(num_workers=self.num_workers), run_config=run_config)

    def _config(self, **config: Any) -> dict:
        cls = type(self)
        return {"framework_rank": cls.framework_rank, "all_gather": cls.all_gather, **config}

    def _fit(self, train_fn: Callable, run_config: Callable[..., trainkit.RunConfig],
             **config: Any) -> list[list[dict]]:
        collect = _Collect()
        self.trainer(train_fn, run_config(callbacks=[collect]), self._config(**config)).fit()
        return collect.reports

    @_GUARDS
    def test_framework_ranks_and_collective_follow_trainkit_ranks(self, run_config) -> None:
        (metrics,) = self._fit(_ranks_fn, run_config)
        _check_ranks(metrics, self.num_workers, type(self).__name__)

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
    def test_shutdown_tears_the_framework_down_and_is_repeatable(self, ray_cluster, run_config, monkeypatch) -> None:
        backend_cls, probes = self.backend_config.backend_cls, []
        on_shutdown = backend_cls.on_shutdown

        def probed_on_shutdown(backend, worker_group, backend_config) -> None:  # in the driver, workers still up
            try:
                on_shutdown(backend, worker_group, backend_config)
            finally:
                probes.append(worker_group.execute(type(self).is_initialized))

        monkeypatch.setattr(backend_cls, "on_shutdown", probed_on_shutdown)
        for run in (1, 2):  # a second group on the same cluster sets the framework up again
            (metrics,) = self._fit(_ranks_fn, run_config)
            _check_ranks(metrics, self.num_workers, f"run {run}")
            assert len(probes) == run, f"run {run}: {backend_cls.__name__}.on_shutdown was not called"
            still = [rank for rank, up in enumerate(probes[-1]) if up]
            assert not still, (f"run {run}: is_initialized() is still true on rank(s) {still} after "
                               f"{backend_cls.__name__}.on_shutdown: it must tear down what on_start set up")
            _assert_resources_released(ray_cluster)

    @_LOCAL_GUARDS
    def test_local_mode(self, run_config) -> None:
        entry, collect = _entry_for(type(self.backend_config)), _Collect()
        trainkit.Trainer(_local_fn, backend=entry.name, scaling_config=ScalingConfig(num_workers=0),
                         run_config=run_config(callbacks=[collect])).fit()
        assert collect.reports == [[{"world_rank": 0, "world_size": 1}]], collect.reports
        assert not type(self).is_initialized(), "is_initialized() is still true in the driver after local mode ended"

