"""The checks of ``BackendConformance`` that need more than one run or one node: two runs at once
on one host, and ranks on two simulated nodes (in a driver of its own, ``trainkit.testing._probes``)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest

from trainkit.testing import subprocesses
from trainkit.testing._conformance.checks import _both_at_once, _check_two_nodes
from trainkit.testing._conformance.guards import GUARDS as _GUARDS
from trainkit.testing._conformance.hooks import given_hook
from trainkit.testing._conformance.metadata import _entry_for
from trainkit.testing._conformance.worker_fns import _Collect, _concurrent_fn


def _probe_own(variable: str) -> bool:
    """Variables that differ between the two runs by design: Ray's per-session ones, the switch."""
    return variable.startswith("RAY_") or variable == "TRAINKIT_DISABLED_PLUGINS"


def _beside_differences(with_it: dict, without: dict) -> list[str]:
    """What differs between the two runs of the ``beside`` probe, in words (Ray's per-session
    variables aside)."""
    found = []
    for label in ("with", "without"):
        run = with_it if label == "with" else without
        if "reports" not in run:
            found.append(f"the run {label} the plugin did not report")
    if found:
        return found
    for rank, (a, b) in enumerate(zip(with_it["reports"][0], without["reports"][0])):
        env = sorted(k for k in a["env"].keys() | b["env"].keys()
                     if not _probe_own(k) and a["env"].get(k) != b["env"].get(k))
        found += [f"rank {rank}'s environment {k}: {b['env'].get(k, '<unset>')!r} -> {a['env'].get(k, '<unset>')!r}"
                  for k in env]
        if a["threads"] != b["threads"]:
            found.append(f"rank {rank}'s threads: {b['threads']} -> {a['threads']}")
        if a["logging"] != b["logging"]:
            found.append(f"rank {rank}'s root logger (level, handlers): {b['logging']} -> {a['logging']}")
    ours, theirs = with_it["driver_env"], without["driver_env"]
    driver = {k: v for k, v in ours.items() if ours.get(k) != theirs.get(k) and not _probe_own(k)}
    found += [f"the driver's environment {k}: {v[0]!r} -> {v[1]!r} during the run" for k, v in sorted(driver.items())]
    return found


class HostChecks:
    """Mixed into ``BackendConformance``."""

    def test_installed_plugin_leaves_other_backends_runs_alone(self, tmp_path) -> None:
        """A run of trainkit's own backend (no framework; 2 workers, in a driver of its own) is the
        same with the plugin installed as with it disabled (``TRAINKIT_DISABLED_PLUGINS``): each
        worker's environment, threads and root logger, and the driver's environment."""
        entry = _entry_for(type(self.backend_config))
        with_it = _run_probe("beside", self, tmp_path / "with")
        without = _run_probe("beside", self, tmp_path / "without", env={"TRAINKIT_DISABLED_PLUGINS": entry.plugin})
        differences = _beside_differences(with_it, without)
        assert not differences, (
            f"with the plugin {entry.plugin!r} installed, a run of another backend (trainkit's own BackendConfig, 2 "
            f"workers) differs from the same run with it disabled (TRAINKIT_DISABLED_PLUGINS={entry.plugin}): "
            + "; ".join(differences) + ". A plugin's hooks run in every trainkit run, whatever its backend "
            "(trainkit_setup_accelerators, trainkit_check_inputs): act only for your own backend "
            f"(isinstance(backend_config, {type(self.backend_config).__name__})), and set threads, environment "
            "and logging in your backend's on_start or train_fn_context, never for every run")

    @_GUARDS
    def test_two_runs_at_once_on_one_host(self, run_config, tmp_path) -> None:
        """Two runs of the plugin at the same time on this machine (two fits, in two threads of this
        driver, each on its own workers): both set up, each all-gather holds its own run's values,
        and both succeed. A fixed port (the framework's default) or a rendezvous shared across jobs
        fails one of them."""

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

        _both_at_once(fit, "conformance-run")
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
        _check_two_nodes(out, self.num_workers, type(self).__name__, given_hook(type(self), "shard") is not None)


def _run_probe(probe: str, suite: Any, tmp_path: Any, timeout_s: float = 300, env: dict | None = None) -> dict:
    """``trainkit.testing._probes`` in a driver process of its own (with ``env`` added to this
    process's environment); its results."""
    from ray import cloudpickle

    tmp_path.mkdir(parents=True, exist_ok=True)
    spec, out = tmp_path / f"{probe}.spec", tmp_path / f"{probe}.json"
    with open(spec, "wb") as f:
        cloudpickle.dump({"probe": probe, "suite": suite, "storage": str(tmp_path / "storage")}, f)
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocesses.run([sys.executable, "-m", "trainkit.testing._probes", str(spec), str(out)],
                            capture_output=True, text=True, timeout=timeout_s, env=env)
    if not out.exists():
        raise AssertionError(f"the {probe} probe's driver ended (status {done.returncode}) without results:\n"
                             f"{done.stderr[-3000:]}")
    return json.loads(out.read_text())

