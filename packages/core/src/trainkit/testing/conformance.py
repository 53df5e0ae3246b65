"""Conformance suites a plugin's tests subclass: the checks every backend and checkpoint helper
must pass, run with real Ray workers.

Example (in a plugin's ``tests/test_conformance.py``, with ``pytest_plugins = ["trainkit.testing"]``
in its ``conftest.py``); the three functions run on the workers::

    from trainkit.testing import BackendConformance, CheckpointConformance

    def framework_rank() -> int:                    # inside the training function
        return torch.distributed.get_rank()

    def all_gather(value: float) -> list[float]:    # inside the training function, on every rank
        gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather(gathered, torch.tensor([value], dtype=torch.float64))
        return [t.item() for t in gathered]

    def is_initialized() -> bool:                   # after Backend.on_shutdown
        return torch.distributed.is_initialized()

    class TestTorchBackend(BackendConformance):
        backend_config = TorchConfig()
        framework_modules = ("torch",)
        framework_rank = staticmethod(framework_rank)
        all_gather = staticmethod(all_gather)
        is_initialized = staticmethod(is_initialized)

    class TestTorchCheckpointIO(CheckpointConformance):
        checkpoint_io = TorchCheckpointIO()

        def make_state(self, seed):
            return {"w": torch.arange(4.0) + seed}

        def assert_same(self, loaded, saved):
            assert torch.equal(loaded["w"], saved["w"])
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import os
import sys
import uuid
import warnings
from typing import Any, Callable, ClassVar

import pytest

import trainkit
from trainkit import (
    BackendConfig,
    Checkpoint,
    CheckpointCorruptError,
    CheckpointIO,
    DataParallelTrainer,
    ScalingConfig,
    TrainingFailedError,
)
from trainkit.testing import subprocesses

__all__ = ["BackendConformance", "CheckpointConformance"]

_GUARDS = pytest.mark.usefixtures("ray_cluster", "no_leaked_env", "no_leaked_threads", "no_leaked_processes")
_LOCAL_GUARDS = pytest.mark.usefixtures("no_leaked_env", "no_leaked_threads", "no_leaked_processes")


class _Collect(trainkit.UserCallback):
    """Every rank's metrics of every report, in the driver."""

    def __init__(self) -> None:
        self.reports: list[list[dict[str, Any]]] = []

    def after_report(self, run_context, metrics, checkpoint) -> None:
        self.reports.append(metrics)


def _ranks_fn(config: dict) -> None:
    ctx = trainkit.get_context()
    rank = ctx.get_world_rank()
    trainkit.report({"world_rank": rank, "local_rank": ctx.get_local_rank(), "node_rank": ctx.get_node_rank(),
                     "world_size": ctx.get_world_size(), "local_world_size": ctx.get_local_world_size(),
                     "framework_rank": int(config["framework_rank"]()),
                     "gathered": [float(v) for v in config["all_gather"](float(rank))]})


def _failing_fn(config: dict) -> None:
    config["all_gather"](1.0)  # the backend is up and communicating before the failure
    rank = trainkit.get_context().get_world_rank()
    if rank == config["failing_rank"]:
        raise ValueError(f"conformance: rank {rank} fails on purpose")
    trainkit.report({"rank": rank})


def _report_callback_fn(config: dict) -> None:
    rank = trainkit.get_context().get_world_rank()
    for step in range(3):
        config["report_callback"]({"loss": 1.0 / (step + 1), "rank_value": float(rank)})


def _concurrent_fn(config: dict) -> None:
    """One of two runs at once: rank 0 waits (up to 120 s) until the other run is training too, or
    failed, so that both runs' frameworks are up together; then an all-gather of run-marked values."""
    import time

    run, sync = config["run"], config["sync"]
    if trainkit.get_context().get_world_rank() == 0:
        open(os.path.join(sync, f"ready{run}"), "w").close()
        other = 1 - run
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
                os.path.exists(os.path.join(sync, f"{what}{other}")) for what in ("ready", "failed")):
            time.sleep(0.05)
    rank = trainkit.get_context().get_world_rank()
    trainkit.report({"gathered": [float(v) for v in config["all_gather"](float(100 * run + rank))]})


def _fails_once_fn(config: dict) -> None:
    ctx = trainkit.get_context()
    config["all_gather"](1.0)
    if ctx.get_attempt() == 0 and ctx.get_world_rank() == 0:
        raise RuntimeError("conformance: the first attempt fails on purpose")
    trainkit.report({"attempt": ctx.get_attempt()})


_STANDARD_CONFIGS = {"train_loop_config", "backend_config", "scaling_config", "run_config", "dataset_config",
                     "validation_config"}


def _config_keyword(trainer_cls: type) -> str | None:
    """The keyword a plugin's Trainer takes its own config by: its ``config_arg``, else the one
    ``*_config`` parameter of its ``__init__`` that is not a standard one (``paddle_config=``)."""
    if getattr(trainer_cls, "config_arg", None):
        return trainer_cls.config_arg
    try:
        parameters = inspect.signature(trainer_cls.__init__).parameters
    except (TypeError, ValueError):
        return None
    own = [name for name in parameters if name.endswith("_config") and name not in _STANDARD_CONFIGS]
    return own[0] if len(own) == 1 else None


def _local_fn(config: dict) -> None:
    ctx = trainkit.get_context()
    trainkit.report({"world_rank": ctx.get_world_rank(), "world_size": ctx.get_world_size()})


def _check_ranks(metrics: list[dict], n: int, trainer: str) -> None:
    """Every rank's report of ``_ranks_fn``: trainkit's ranks, the framework's, and an all-gather in order."""
    assert len(metrics) == n, f"{trainer}: {len(metrics)} rank(s) reported, expected {n}"
    for rank, m in enumerate(metrics):
        assert m["world_rank"] == rank and m["world_size"] == n, f"{trainer}: rank {rank} reported {m}"
        assert m["framework_rank"] == rank, (
            f"{trainer}: on trainkit rank {rank} framework_rank() returned {m['framework_rank']}, expected {rank}: "
            "the backend must give each worker the framework rank trainkit.get_context().get_world_rank() says")
        assert m["gathered"] == [float(r) for r in range(n)], (
            f"{trainer}: on rank {rank} all_gather(rank) returned {m['gathered']}, expected "
            f"{[float(r) for r in range(n)]} (every rank's value, in rank order, on every rank)")
    assert sorted((m["node_rank"], m["local_rank"]) for m in metrics) == [(0, r) for r in range(n)], metrics
    assert all(m["local_world_size"] == n for m in metrics), metrics


# Run as `python -c _SIDE_EFFECTS <package>`: what importing the plugin's package and loading
# plugins (TRAINKIT_PLUGINS names this one) changed in the process, as JSON {what: [before, after]}.
_SIDE_EFFECTS = r"""
import json, logging, os, signal, socket, sys, threading, warnings
import trainkit
from trainkit._internal.plugins import get_plugins

package = sys.argv[1]

def loggers():
    found = {"<root>": [logging.getLevelName(logging.root.level), [repr(h) for h in logging.root.handlers]]}
    for name, lg in sorted(logging.root.manager.loggerDict.items()):
        if isinstance(lg, logging.Logger) and not (name == package or name.startswith(package + ".")):
            found[name] = [logging.getLevelName(lg.level), [repr(h) for h in lg.handlers], lg.propagate, lg.disabled]
    return found

def snapshot():
    handlers = {}
    for sig in sorted(signal.valid_signals()):
        try:
            handlers[signal.Signals(sig).name] = repr(signal.getsignal(sig))
        except (ValueError, OSError):
            pass
    return {"warnings filters": [repr(f) for f in warnings.filters], "logging": loggers(),
            "logging.disable": logging.root.manager.disable, "signal handlers": handlers,
            "sys.excepthook": repr(sys.excepthook), "threading.excepthook": repr(threading.excepthook),
            "socket default timeout": socket.getdefaulttimeout(), "cwd": os.getcwd(), "sys.path": list(sys.path),
            "os.environ": dict(os.environ)}

def diff(before, after):
    if isinstance(before, dict) and isinstance(after, dict):
        keys = sorted(before.keys() | after.keys())
        return {k: f"{before.get(k, '<unset>')!r} -> {after.get(k, '<unset>')!r}" for k in keys
                if before.get(k) != after.get(k)}
    if isinstance(before, list) and isinstance(after, list):
        added, removed = [x for x in after if x not in before], [x for x in before if x not in after]
        return " and ".join([f"added {added}"] * bool(added) + [f"removed {removed}"] * bool(removed)) or "reordered"
    return f"{before!r} -> {after!r}"

before = snapshot()
__import__(package)
get_plugins()
after = snapshot()
changed = {}
for what in before:
    if before[what] != after[what]:
        d = diff(before[what], after[what])
        if isinstance(d, dict):
            changed.update({f"{what}[{k}]": v for k, v in d.items()})
        else:
            changed[what] = d
print(json.dumps(changed, default=repr))
"""


def _normalize(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _plugin_distribution(entry: Any) -> tuple[Any, str | None]:
    """The distribution that installs ``entry``'s plugin, and the plugin's ``FRAMEWORK``."""
    import importlib
    import importlib.metadata as md

    ep = next((ep for ep in md.entry_points(group="trainkit.plugins") if ep.name == entry.plugin), None)
    assert ep is not None and getattr(ep, "dist", None) is not None, (
        f"no installed distribution has the entry point {entry.plugin!r} in the group trainkit.plugins")
    module = importlib.import_module(ep.value.split(":")[0])
    return ep.dist, getattr(module, "FRAMEWORK", None)


def _requirements(dist: Any) -> list:
    """The distribution's requirements that apply here without extras."""
    from packaging.requirements import Requirement

    reqs = [Requirement(r) for r in dist.requires or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


_UNREACHABLE = ("Could not fetch URL", "NewConnectionError", "Failed to establish a new connection",
                "Temporary failure in name resolution", "Max retries exceeded", "Network is unreachable",
                "ConnectTimeoutError", "ReadTimeoutError")


def _index_versions(name: str) -> list[str]:
    """The releases of ``name`` pip finds for this interpreter and platform on its configured index
    (newest first; [] when none); skips the test when pip or the index cannot be reached."""
    import re
    import subprocess

    try:
        done = subprocesses.run([sys.executable, "-m", "pip", "index", "versions", name, "--pre",
                                 "--disable-pip-version-check", "--timeout", "15", "--retries", "1"],
                                capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip index versions {name} took over 120 s: the package index is unreachable")
    text = done.stdout + done.stderr
    if "No module named pip" in text or "unknown command" in text.lower():
        pytest.skip(f"pip (with `pip index`) is not installed in this environment: {text.strip()[-200:]}")
    if any(sign in text for sign in _UNREACHABLE):
        pytest.skip(f"the package index is unreachable (offline?): {text.strip()[-300:]}")
    if done.returncode != 0:
        if "No matching distribution found" in text:
            return []
        raise AssertionError(f"pip index versions {name} failed: {text.strip()[-1000:]}")
    found = re.search(r"Available versions: (.*)", text)
    return [v.strip() for v in found.group(1).split(",")] if found else []


def _entry_for(config_cls: type) -> Any:
    """The registry entry of ``config_cls``; if none, why: the plugins that did not load."""
    from trainkit._internal.plugins import get_plugins

    plugins = get_plugins()
    entry = next((e for e in plugins.backends.entries.values() if e.config_cls is config_cls), None)
    assert entry is not None, (f"no loaded plugin registers {config_cls.__name__} "
                               f"(registry.register(name, {config_cls.__name__}, Trainer)). {plugins.not_loaded()}")
    return entry


class BackendConformance:
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

    Optional hooks (staticmethods; each probe skips, saying so, when its hook is not set):

    ``shard(rows) -> list``         the rows of ``rows`` this rank trains on, through the plugin's
                                    data helper (in the training function)
    ``report_callback(metrics)``    reports ``metrics`` through the plugin's report callback, as the
                                    framework calls it on every rank at a step's end
    """

    backend_config: ClassVar[BackendConfig]
    framework_modules: ClassVar[tuple[str, ...]] = ()
    num_workers: ClassVar[int] = 2
    #: ``shard(rows) -> rows``: the rows of ``rows`` this rank trains on, through the plugin's data
    #: helper (a sampler, a loader; in the training function). None: the data probes skip.
    shard: ClassVar[Callable[[list], list] | None] = None
    #: False skips ``test_ranks_on_two_nodes``, for a framework that binds by network interface name
    #: (``HOROVOD_GLOO_IFACE``): the simulated nodes' addresses (127.0.0.2, 127.0.0.3) are on no interface.
    simulated_nodes: ClassVar[bool] = True
    #: ``report_callback(metrics)``: report ``metrics`` (a dict of floats) through the plugin's report
    #: callback, as the framework calls it on every rank at the end of a step (in the training
    #: function). None: the probe skips.
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

    def test_loading_plugins_imports_no_framework(self) -> None:
        assert self.framework_modules, "set framework_modules to the framework's top-level modules, e.g. ('torch',)"
        package = type(self.backend_config).__module__.split(".")[0]
        code = (f"import json, sys, trainkit, {package}\n"
                "from trainkit._internal.plugins import get_plugins\n"
                "plugins = get_plugins()\n"
                "print(json.dumps({'imported': sorted(m for m in %r if m in sys.modules),\n"
                "                  'registered': [e.config_cls.__name__ for e in plugins.backends.entries.values()],\n"
                "                  'not_loaded': plugins.not_loaded()}))"
                % (self.framework_modules,))
        out = subprocesses.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        report = json.loads(out.stdout.strip().splitlines()[-1])
        assert report["imported"] == [], f"importing {package} and loading plugins imported {report['imported']}"
        name = type(self.backend_config).__name__
        assert name in report["registered"], f"no loaded plugin registers {name}. {report['not_loaded']}"

    def test_loading_the_plugin_changes_no_process_state(self) -> None:
        """Importing the plugin's package and loading its entry point (as ``trainkit`` does in every
        process) leave the process as they found it: warnings filters, logging (the root logger's
        handlers and level, other packages' loggers), signal handlers, the excepthooks, the working
        directory, ``sys.path`` and ``os.environ``."""
        entry = _entry_for(type(self.backend_config))
        package = type(self.backend_config).__module__.split(".")[0]
        env = {**os.environ, "TRAINKIT_PLUGINS": entry.plugin}  # trainkit loads this plugin alone
        out = subprocesses.run([sys.executable, "-c", _SIDE_EFFECTS, package], capture_output=True, text=True,
                               timeout=120, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        changed = json.loads(out.stdout.strip().splitlines()[-1])
        assert not changed, (
            f"importing {package} and loading the plugin {entry.plugin!r} changed the process: "
            + "; ".join(f"{what}: {detail}" for what, detail in changed.items())
            + ". A plugin is loaded into every trainkit process, the user's included: it must leave global state "
              "alone (set warnings filters, logging, signal handlers or environment variables in the functions "
              "that run on the workers, scoped, e.g. warnings.catch_warnings() or BackendConfig.train_fn_context())")

    def test_framework_is_declared_with_a_lower_bound(self) -> None:
        """The plugin's distribution requires its framework (``FRAMEWORK`` in the entry point's
        module), unconditionally and with a lower bound (the oldest release the plugin supports)."""
        entry = _entry_for(type(self.backend_config))
        dist, framework = _plugin_distribution(entry)
        if framework is None or _normalize(framework) == _normalize(dist.metadata["Name"]):
            pytest.skip(f"the plugin {entry.plugin!r} names no framework distribution of its own (FRAMEWORK)")
        reqs = [r for r in _requirements(dist) if _normalize(r.name) == _normalize(framework)]
        name = f"{dist.metadata['Name']} {dist.version}"
        assert reqs, (f"{name} does not require its framework {framework!r} (FRAMEWORK), or only under an extra or "
                      f"a marker: declare it in [project] dependencies with the oldest release it supports, e.g. "
                      f"'{framework}>=X.Y'")
        assert any(spec.operator in (">=", ">", "~=", "==", "===") for r in reqs for spec in r.specifier), (
            f"{name} requires {', '.join(map(str, reqs))} without a lower bound: an old {framework} the plugin "
            f"never ran with would be accepted. Declare the oldest supported release, e.g. '{framework}>=X.Y'")

    def test_declared_requirements_resolve_on_this_platform(self) -> None:
        """Each requirement of the plugin's distribution (but trainkit's own) has a release on the
        package index pip is configured with, for this Python and platform, within its bounds
        (``pip index versions``; skipped when pip or the index cannot be reached)."""
        entry = _entry_for(type(self.backend_config))
        dist, _ = _plugin_distribution(entry)
        reqs = [r for r in _requirements(dist) if not _normalize(r.name).startswith("trainkit")]
        if not reqs:
            pytest.skip(f"{dist.metadata['Name']} declares no requirement to resolve (trainkit's own aside)")
        for req in reqs:
            versions = _index_versions(req.name)
            matching = [v for v in versions if req.specifier.contains(v, prereleases=True)]
            assert matching, (
                f"{dist.metadata['Name']} requires {req}, but the package index has "
                + (f"no release of {req.name} for this Python and platform" if not versions
                   else f"only {req.name} {', '.join(versions[:8])} here, none within {req.specifier}")
                + f" ({sys.platform}, Python {sys.version_info.major}.{sys.version_info.minor}): a user here could "
                  "not install the plugin. Depend on a distribution that exists for every platform you support, "
                  "or mark the requirement for the platforms it has (e.g. '; sys_platform == \"linux\"')")

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

    @_GUARDS
    def test_registered_trainers_fit(self, run_config, monkeypatch) -> None:
        """Each way to build the plugin's Trainer fits; a config given through the Trainer's own keyword
        (its ``config_arg``, else ``backend_config``) is the one its backend's ``on_start`` receives."""
        entry = _entry_for(type(self.backend_config))
        by_name = functools.partial(trainkit.Trainer, backend=entry.name)
        trainers = [(f"trainkit.Trainer(fn, backend={entry.name!r})", by_name, "backend_config")]
        if entry.trainer_cls is not None:
            label, arg = f"the registered {entry.trainer_cls.__qualname__}", _config_keyword(entry.trainer_cls)
            trainers += [(label, entry.trainer_cls, None), (label, entry.trainer_cls, arg or "backend_config")]
        received = _record_on_start(self.backend_config.backend_cls, monkeypatch)
        for label, trainer_cls, arg in trainers:
            collect, (config, mark) = _Collect(), _marked(self.backend_config)
            try:
                trainer = trainer_cls(_ranks_fn, train_loop_config=self._config(), **({arg: config} if arg else {}),
                                      scaling_config=ScalingConfig(num_workers=self.num_workers),
                                      run_config=run_config(callbacks=[collect]))
            except Exception as exc:  # noqa: BLE001 - named for the author
                raise AssertionError(f"{label} could not be built: {type(exc).__name__}: {exc}") from exc
            try:
                trainer.fit()
            except TrainingFailedError as exc:
                raise AssertionError(f"{label}.fit() failed: {exc}") from exc
            assert len(collect.reports) == 1, f"{label}: {len(collect.reports)} reports, expected 1"
            _check_ranks(collect.reports[0], self.num_workers, label)
            got = received[-1] if received else None
            assert not arg or getattr(got, _MARK, None) == mark, (
                f"{label} dropped the user's config: built with {arg}={config!r}, its backend's on_start got "
                f"{got!r}, another {type(got).__name__} (the Trainer must pass on the config it was given)")

    @_GUARDS
    def test_registered_trainer_keeps_the_users_run_config(self, run_config) -> None:
        """The registered Trainer runs with the user's ``RunConfig``: with ``FailureConfig(max_failures=1)``
        a training function that fails on its first attempt is retried and the run succeeds, under
        the user's run name."""
        entry = _entry_for(type(self.backend_config))
        if entry.trainer_cls is None:
            pytest.skip(f"the plugin registers no Trainer of its own for {type(self.backend_config).__name__}")
        label, collect = f"the registered {entry.trainer_cls.__qualname__}", _Collect()
        rc = run_config(failure_config=trainkit.FailureConfig(max_failures=1), callbacks=[collect])
        trainer = entry.trainer_cls(_fails_once_fn, train_loop_config=self._config(),
                                    scaling_config=ScalingConfig(num_workers=self.num_workers), run_config=rc)
        try:
            result = trainer.fit()
        except TrainingFailedError as exc:
            raise AssertionError(
                f"{label} ignored the user's RunConfig: built with run_config=RunConfig(failure_config="
                f"FailureConfig(max_failures=1)), the run failed on its first failure instead of retrying "
                f"({exc.error_type} on rank {exc.rank}). The Trainer must pass run_config on as given, never "
                "build a RunConfig of its own") from exc
        assert [m["attempt"] for m in collect.reports[-1]] == [1] * self.num_workers, collect.reports
        assert os.path.basename(os.path.normpath(str(result.path))) == rc.name, (
            f"{label} ran as {result.path}, not as the user's run {rc.name!r} under {rc.storage_path}: "
            "the Trainer must pass run_config on as given")

    @_GUARDS
    def test_report_callback_reaches_the_driver_from_every_rank(self, run_config) -> None:
        """Three steps reported through the plugin's report callback (``report_callback``) on every
        rank reach the driver as three reports, each with every rank's metrics."""
        if type(self).report_callback is None:
            pytest.skip("set report_callback = staticmethod(...) to probe the plugin's report callback")
        reports = self._fit(_report_callback_fn, run_config, report_callback=type(self).report_callback)
        assert len(reports) == 3 and all(len(r) == self.num_workers for r in reports), (
            f"3 steps reported through report_callback on {self.num_workers} ranks reached the driver as "
            f"{len(reports)} report(s) (ranks per report: {[len(r) for r in reports]}): every rank must call "
            "trainkit.report at every step (the ranks' reports are gathered into one); a callback that reports "
            "on rank 0 alone has every report dropped. Save the checkpoint on rank 0 alone, report on every rank")

    @_GUARDS
    def test_two_runs_at_once_on_one_host(self, run_config, tmp_path) -> None:
        """Two runs of the plugin at the same time on this machine (two fits, in two threads of this
        driver, each on its own workers): both set up, each all-gather holds its own run's values,
        and both succeed. A fixed port (the framework's default) or a rendezvous shared across jobs
        fails one of them."""
        import threading

        sync, results = tmp_path / "sync", {}
        sync.mkdir()

        def fit(run: int) -> None:
            collect = _Collect()
            try:
                self.trainer(_concurrent_fn, run_config(callbacks=[collect]),
                             self._config(run=run, sync=str(sync))).fit()
                results[run] = collect.reports
            except Exception as exc:  # noqa: BLE001 - reported below
                results[run] = exc
                (sync / f"failed{run}").touch()  # the other run stops waiting for this one

        threads = [threading.Thread(target=fit, args=(run,), name=f"conformance-run{run}") for run in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for run in (0, 1):
            if isinstance(results[run], BaseException):
                raise AssertionError(
                    f"run {run} of two runs at once on one host failed: {type(results[run]).__name__}: "
                    f"{results[run]}. Two jobs on one host must not collide: take ports from "
                    "worker_group.free_address()/rendezvous() (never the framework's fixed default port) and key "
                    "any rendezvous by the run (a name, file or key per run: "
                    "trainkit.get_context().get_experiment_name())") from results[run]
            (metrics,) = results[run]
            expected = [float(100 * run + r) for r in range(self.num_workers)]
            for rank, m in enumerate(metrics):
                assert m["gathered"] == expected, (
                    f"run {run} of two runs at once: on rank {rank} all_gather returned {m['gathered']}, expected "
                    f"{expected} (its own run's values): the two runs' ranks met in one rendezvous; key it by the "
                    "run (trainkit.get_context().get_experiment_name()), with a port from free_address()")

    def test_ranks_on_two_nodes(self, tmp_path) -> None:
        """The plugin's training with its ranks on two nodes whose addresses differ (127.0.0.2 and
        127.0.0.3, simulated on this machine in a driver of its own): ranks and the all-gather as on
        one node, no two ranks on different nodes talk through 127.0.0.1, and the data helper
        (``shard``) gives the ranks disjoint rows that cover the dataset."""
        if not type(self).simulated_nodes:
            pytest.skip(f"{type(self).__name__}.simulated_nodes is False: the framework binds by network interface, "
                        "which nodes simulated at 127.0.0.2 and 127.0.0.3 cannot model")
        out = _run_probe("multinode", self, tmp_path)
        _check_two_nodes(out, self.num_workers, type(self).__name__, type(self).shard is not None)

    @_LOCAL_GUARDS
    def test_local_mode(self, run_config) -> None:
        entry, collect = _entry_for(type(self.backend_config)), _Collect()
        trainkit.Trainer(_local_fn, backend=entry.name, scaling_config=ScalingConfig(num_workers=0),
                         run_config=run_config(callbacks=[collect])).fit()
        assert collect.reports == [[{"world_rank": 0, "world_size": 1}]], collect.reports
        assert not type(self).is_initialized(), "is_initialized() is still true in the driver after local mode ended"


_LOOPBACK_HINT = ("127.0.0.1 is each host's own loopback: on two hosts the rank dialing it reaches its own host, "
                  "not the other rank's. Take the address from worker_group.free_address(rank) or "
                  "worker_group.rendezvous() (rank 0's node address), never a fixed 127.0.0.1/localhost")


def _run_probe(probe: str, suite: Any, tmp_path: Any, timeout_s: float = 300) -> dict:
    """``trainkit.testing._probes`` in a driver process of its own; its results."""
    from ray import cloudpickle

    spec, out = tmp_path / f"{probe}.spec", tmp_path / f"{probe}.json"
    with open(spec, "wb") as f:
        cloudpickle.dump({"probe": probe, "suite": suite, "storage": str(tmp_path / "storage")}, f)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocesses.run([sys.executable, "-m", "trainkit.testing._probes", str(spec), str(out)],
                            capture_output=True, text=True, timeout=timeout_s, env=env)
    if not out.exists():
        raise AssertionError(f"the {probe} probe's driver ended (status {done.returncode}) without results:\n"
                             f"{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def _cross_node_loopback(snapshots: list[dict], ray_servers: list[list], judged_ports: set[int] | None) -> list[str]:
    """Connections a rank dialed through 127.0.0.1 to a rank on another node, in words. Servers the
    workers ran before ``Backend.on_start`` (Ray's own, ``ray_servers``: [pid, port]) aside; only
    servers on ``judged_ports`` where it is not None."""
    by_end = {}  # (local ip, port, remote ip, port) -> (rank, node ip, pid)
    servers = set()  # (pid, port) of every listening socket
    for snap in snapshots:
        servers.update(tuple(server) for server in snap.get("listening", []))
        for pid, lip, lport, rip, rport in snap["connections"]:
            by_end[(lip, lport, rip, rport)] = (snap["world_rank"], snap["node_ip"], pid)
    servers -= {tuple(server) for server in ray_servers}
    found = set()
    for snap in snapshots:
        for pid, lip, lport, rip, rport in snap["connections"]:
            peer = by_end.get((rip, rport, lip, lport))
            dialed = rip.removeprefix("::ffff:")
            if (peer and (peer[2], rport) in servers and peer[1] != snap["node_ip"]
                    and (judged_ports is None or rport in judged_ports)
                    and (dialed.startswith("127.0.0.1") or dialed == "::1")):
                found.add(f"rank {snap['world_rank']} (node {snap['node_ip']}) reached rank {peer[0]} "
                          f"(node {peer[1]}) at {dialed}:{rport}")
    return sorted(found)


def _check_two_nodes(out: dict, n: int, suite: str, has_shard: bool) -> None:
    where = "with its ranks on two nodes (127.0.0.2 and 127.0.0.3, simulated on this machine)"
    # where the hostname resolves to 127.0.0.1, a framework's default bind address is loopback here though
    # not on real hosts (gloo's): then only the ports the worker group handed the backend are judged
    judged = set(out.get("handed_ports", [])) if str(out.get("hostname_address")).startswith("127.0.0.1") else None
    loopback = _cross_node_loopback(out.get("after_on_start", []) + (out.get("reports") or [[]])[-1],
                                    out.get("listening_before", []), judged)
    assert not loopback, f"{suite}: {where}, ranks talk across nodes through 127.0.0.1: {'; '.join(loopback)}. " \
                         + _LOOPBACK_HINT
    assert "error" not in out, (f"{suite}: the run failed {where}: {out['error']}. A rendezvous address fixed to "
                                f"127.0.0.1/localhost, or a socket bound to loopback only, breaks on two hosts: "
                                f"take rank 0's node address from worker_group.free_address(0) or rendezvous(). "
                                f"(A framework that binds by network interface name cannot run on these simulated "
                                f"nodes, whose addresses are on no interface: set simulated_nodes = False)")
    reports = out.get("reports") or []
    assert len(reports) == 1, f"{suite}: {where}, {len(reports)} reports reached the driver, expected 1"
    metrics = reports[0]
    assert len(metrics) == n, f"{suite}: {where}, {len(metrics)} rank(s) reported, expected {n}"
    assert len({m["node_ip"] for m in metrics}) == 2, f"{suite}: the ranks did not span two nodes: {metrics}"
    for rank, m in enumerate(metrics):
        assert m["framework_rank"] == rank, (
            f"{suite}: {where}, on trainkit rank {rank} (node rank {m['node_rank']}, local rank {m['local_rank']}) "
            f"framework_rank() returned {m['framework_rank']}: the framework rank must be the global rank "
            "(trainkit.get_context().get_world_rank()), not the local one")
        assert m["gathered"] == [float(r) for r in range(n)], (
            f"{suite}: {where}, on rank {rank} all_gather(rank) returned {m['gathered']}, expected "
            f"{[float(r) for r in range(n)]}")
    if has_shard:
        _check_shards({m["world_rank"]: m for m in metrics}, f"{suite}: {where}, the data helper (shard)")


def _check_shards(by_rank: dict[int, dict], label: str) -> None:
    """Each rank's ``rows`` (of ``_probes.SHARD_ROWS``): pairwise disjoint and together every row."""
    from trainkit.testing._probes import SHARD_ROWS

    ranks = sorted(by_rank)
    for i, a in enumerate(ranks):
        for b in ranks[i + 1:]:
            same = sorted(set(by_rank[a]["rows"]) & set(by_rank[b]["rows"]))
            if same:
                ma, mb = by_rank[a], by_rank[b]
                raise AssertionError(
                    f"{label} gave rank {a} (node rank {ma.get('node_rank')}, local rank {ma.get('local_rank')}) and "
                    f"rank {b} (node rank {mb.get('node_rank')}, local rank {mb.get('local_rank')}) the same rows "
                    f"{same} of {SHARD_ROWS}: shard by the global rank and world size "
                    "(trainkit.get_context().get_world_rank(), get_world_size()), not the local rank or node")
    covered = set().union(*(set(m["rows"]) for m in by_rank.values()))
    missing = sorted(set(range(SHARD_ROWS)) - covered)
    assert not missing, (f"{label}: no rank got rows {missing} of {SHARD_ROWS} (shards by rank: "
                         f"{ {r: by_rank[r]['rows'] for r in ranks} }): the shards must cover the dataset")


_MARK = "_trainkit_conformance_mark"


def _marked(config: BackendConfig) -> tuple[BackendConfig, str]:
    """A copy of ``config`` that carries a mark of its own, and the mark."""
    marked, mark = copy.copy(config), uuid.uuid4().hex
    object.__setattr__(marked, _MARK, mark)  # frozen dataclasses too
    return marked, mark


def _record_on_start(backend_cls: type, monkeypatch) -> list[BackendConfig]:
    """The backend config every ``backend_cls.on_start`` is called with (in the driver), in order."""
    received, on_start = [], backend_cls.on_start

    def recorded_on_start(backend, worker_group, backend_config) -> None:
        received.append(backend_config)
        on_start(backend, worker_group, backend_config)

    monkeypatch.setattr(backend_cls, "on_start", recorded_on_start)
    return received


def _assert_resources_released(ray: Any, timeout_s: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while (free := ray.available_resources().get("CPU", 0)) < (total := ray.cluster_resources()["CPU"]):
        if time.monotonic() > deadline:
            raise AssertionError(f"{total - free} CPUs still held {timeout_s}s after fit() returned")
        time.sleep(0.05)


def _save_and_report_fn(config: dict) -> None:
    """Every rank reports its own state through the helper; each report that carries a checkpoint
    leaves a file naming its rank (whatever way the helper calls ``trainkit.report``)."""
    from trainkit._internal.worker.session import Session

    io: CheckpointIO = config["checkpoint_io"]
    rank, report = trainkit.get_context().get_world_rank(), Session.report

    def recorded_report(session: Session, metrics: dict, checkpoint: Any = None, *args: Any, **kwargs: Any) -> None:
        if checkpoint is not None:
            open(os.path.join(config["saves"], f"{rank}-{uuid.uuid4().hex}"), "w").close()
        report(session, metrics, checkpoint, *args, **kwargs)

    Session.report = recorded_report
    try:
        io.report({"rank": rank}, config["states"][rank])
    finally:
        Session.report = report


def _fit_two(train_fn: Callable, config: dict, run_config: trainkit.RunConfig) -> trainkit.Result:
    return DataParallelTrainer(train_fn, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                               run_config=run_config).fit()


def _resume_fn(config: dict) -> None:
    checkpoint = trainkit.get_checkpoint()
    assert checkpoint is not None, "the resumed run got no checkpoint"
    config["assert_same"](config["checkpoint_io"].load(checkpoint), config["states"][0])
    trainkit.report({"resumed": 1})


class CheckpointConformance:
    """What every ``CheckpointIO`` must do. Subclass it as ``Test<Name>CheckpointIO`` and set
    ``checkpoint_io``; override ``make_state(seed)`` (an example of the framework's state; different
    seeds give different states, so that each rank holds its own) and ``assert_same`` (raises
    unless a loaded state equals the saved one). The committed checkpoint must hold rank 0's state,
    reported by rank 0 alone (other ranks may save too, where the framework needs it, e.g. Keras
    under a multi-worker strategy, but report metrics only). A ``make_state(self)`` written before
    the seed existed still runs, deprecated: it warns once (``DeprecationWarning``) and every rank
    then holds the same state."""

    checkpoint_io: ClassVar[CheckpointIO]
    #: ``resume(checkpoint) -> state``: the state the plugin's resume helper restores from
    #: ``checkpoint`` (a ``trainkit.Checkpoint`` written by ``checkpoint_io.save``; called in the
    #: test process). None: the probe skips.
    resume: ClassVar[Callable[[Checkpoint], Any] | None] = None

    @pytest.fixture
    def preimported_modules(self, preimported_modules: tuple[str, ...]) -> tuple[str, ...]:
        return (*preimported_modules, type(self.checkpoint_io).__module__)  # see BackendConformance.preimported_modules

    def make_state(self, seed: int) -> Any:
        raise NotImplementedError("return an example state of your framework from make_state(seed); "
                                  "different seeds must give different states")

    def assert_same(self, loaded: Any, saved: Any) -> None:
        assert loaded == saved

    def _make_state(self, seed: int) -> Any:
        """``make_state(seed)``, or ``make_state()`` where the subclass's override predates the seed
        (deprecated: it warns once, and every rank then holds the same state)."""
        if _takes_seed(self.make_state):
            return self.make_state(seed)
        _warn_once(type(self), "make_state", (
            f"{type(self).__qualname__}.make_state() takes no seed: add one, make_state(self, seed), and return a "
            "different state for each seed (the suite gives each rank its own state, so that a checkpoint of the "
            "wrong rank fails; without a seed every rank holds the same state). make_state() without a seed is "
            "deprecated and goes after one minor release"))
        return self.make_state()  # type: ignore[call-arg]

    def _states(self) -> list[Any]:
        """One state per rank, each different (else a checkpoint of the wrong rank would pass)."""
        states = [self._make_state(seed) for seed in range(2)]
        if not _takes_seed(self.make_state):
            return states  # the same state twice: the deprecated make_state() cannot tell the ranks apart
        try:
            self.assert_same(states[1], states[0])
        except AssertionError:
            return states
        raise AssertionError("make_state(0) and make_state(1) are the same by assert_same: the suite gives each "
                             "rank its own state, so different seeds must give different states")

    def _run_config(self, tmp_path) -> dict:
        saves = tmp_path / "saves"
        saves.mkdir()
        return {"checkpoint_io": self.checkpoint_io, "states": self._states(), "assert_same": self.assert_same,
                "saves": str(saves)}

    def test_round_trip_in_process(self, tmp_path) -> None:
        state = self._make_state(0)
        self.checkpoint_io.save(state, str(tmp_path))
        assert os.listdir(tmp_path), "save() wrote no file"
        assert not any(name.startswith(".") for name in os.listdir(tmp_path)), "dot files are trainkit's own"
        self.assert_same(self.checkpoint_io.load(Checkpoint.from_directory(tmp_path)), state)

    @_GUARDS
    def test_round_trip_through_a_run_and_resume(self, run_config, tmp_path) -> None:
        config, rc = self._run_config(tmp_path), run_config()
        helper = f"{type(self.checkpoint_io).__name__}.report"
        try:
            result = _fit_two(_save_and_report_fn, config, rc)
        except TrainingFailedError as exc:
            raise AssertionError(f"{helper} failed the run (checkpoints reported by rank: {_saves(config)}): "
                                 f"{exc}") from exc
        assert _saves(config) == [0], (f"{helper} reported a checkpoint on rank(s) {_saves(config)}: rank 0 alone "
                                       "reports it, once (the other ranks report metrics only)")
        try:
            self.assert_same(self.checkpoint_io.load(result.checkpoint), config["states"][0])
        except AssertionError as exc:
            raise AssertionError(f"the checkpoint {helper} committed does not hold rank 0's state: {exc}") from exc
        resumed = _fit_two(_resume_fn, config, run_config(name=rc.name, storage_path=rc.storage_path))
        assert resumed.metrics == {"resumed": 1}

    def test_resume_helper_resumes_the_checkpoint_it_is_given(self, tmp_path) -> None:
        """Two checkpoints of different states, in directories of unusual names: the resume helper
        (``resume``) given each restores that one's state, whichever was saved last."""
        if type(self).resume is None:
            pytest.skip("set resume = staticmethod(...) to probe the plugin's resume helper")
        resume, states = type(self).resume, self._states()
        dirs = [tmp_path / "elsewhere" / f"run-{seed}" / f"checkpoint_{987 + seed:06d}" for seed in (0, 1)]
        for directory, state in zip(dirs, states):
            directory.mkdir(parents=True)
            self.checkpoint_io.save(state, str(directory))
        for seed in (0, 1):
            try:
                self.assert_same(resume(Checkpoint.from_directory(str(dirs[seed]))), states[seed])
            except Exception as exc:
                raise AssertionError(
                    f"resume(checkpoint) given the checkpoint at {dirs[seed]} (seed {seed}; seed {1 - seed}'s at "
                    f"{dirs[1 - seed]}) did not restore its state: {type(exc).__name__}: {exc}. A resume helper "
                    "must read the checkpoint it is given (its checkpoint argument, else trainkit.get_checkpoint()), "
                    "never a fixed path or the last one it saved") from exc

    @_GUARDS
    def test_altered_file_is_refused(self, run_config, tmp_path) -> None:
        result = _fit_two(_save_and_report_fn, self._run_config(tmp_path), run_config())
        path = result.checkpoint.path
        victim = next(os.path.join(path, n) for n in sorted(os.listdir(path)) if not n.startswith("."))
        with open(victim, "r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]) if first else b"x")
        with pytest.raises(CheckpointCorruptError):
            self.checkpoint_io.load(result.checkpoint)


def _takes_seed(method: Callable) -> bool:
    """Whether a bound ``make_state`` takes a positional argument (the seed)."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # no signature to read: call it as documented
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)


_warned: set[tuple[type, str]] = set()


def _warn_once(cls: type, hook: str, message: str) -> None:
    """A ``DeprecationWarning`` about ``cls``'s override of ``hook``, once per class and process,
    pointing at the override's ``def`` line."""
    if (cls, hook) in _warned:
        return
    _warned.add((cls, hook))
    code = getattr(getattr(cls, hook), "__code__", None)
    if code is None:
        warnings.warn(message, DeprecationWarning, stacklevel=3)
    else:
        warnings.warn_explicit(message, DeprecationWarning, code.co_filename, code.co_firstlineno,
                               module=cls.__module__)


def _saves(config: dict) -> list[int]:
    """The ranks that reported a checkpoint, one entry per report, in rank order."""
    return sorted(int(name.split("-")[0]) for name in os.listdir(config["saves"]))
