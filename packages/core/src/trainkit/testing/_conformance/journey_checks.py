"""The checks of ``BackendConformance`` that run the plugin as its users do: the author's ``journey``
(one small, deterministic training run through the plugin's own helpers and its registered
Trainer) under conditions, each compared with the same journey run plainly ("the straight run").

Invariants, true of every framework: every rank reports every step, in order, with the same world
size; a failure on one rank reaches the caller as an exception; a run stopped after k steps and
resumed reports the straight run's next losses; a retried attempt, a run beside another and a run
with a launcher's variables in the driver's environment report the straight run's losses; the
rows the ranks trained on (where the journey reports them) cover the data."""

from __future__ import annotations

import math
import uuid
from typing import Any

import trainkit
from trainkit import ScalingConfig, TrainingFailedError
from trainkit.testing._conformance.checks import _both_at_once, _check_shards
from trainkit.testing._conformance.guards import GUARDS as _GUARDS
from trainkit.testing._conformance.guards import LOCAL_GUARDS as _LOCAL_GUARDS
from trainkit.testing._conformance.hooks import required_hook
from trainkit.testing._conformance.metadata import _entry_for
from trainkit.testing._conformance.trainer_checks import registered_trainer
from trainkit.testing._conformance.worker_fns import _Collect, _journey_fn

#: the journey's dataset size: divides by neither 2 nor 3 ranks
JOURNEY_ROWS = 7
#: what launchers (torchrun, mpirun, SLURM, TF, XGBoost's tracker, Horovod, JAX) leave in a user's
#: environment: set in the driver, none may change a run trainkit starts
LAUNCHER_ENV = {
    "MASTER_ADDR": "10.255.255.1", "MASTER_PORT": "1", "RANK": "3", "WORLD_SIZE": "5", "LOCAL_RANK": "3",
    "LOCAL_WORLD_SIZE": "5", "NODE_RANK": "2", "GROUP_RANK": "2", "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_SIZE": "5", "PMI_RANK": "3", "PMI_SIZE": "5", "SLURM_PROCID": "3", "SLURM_NTASKS": "5",
    "DMLC_TRACKER_URI": "10.255.255.1", "DMLC_TRACKER_PORT": "1", "DMLC_TASK_ID": "3", "DMLC_NUM_WORKER": "5",
    "HOROVOD_RANK": "3", "HOROVOD_SIZE": "5", "JAX_COORDINATOR_ADDRESS": "10.255.255.1:1",
    "TF_CONFIG": '{"cluster": {"worker": ["10.255.255.1:1", "10.255.255.2:1"]}, "task": {"type": "worker", '
                 '"index": 1}}',
}
_RESUME_HINT = ("the resume must restore everything the next step depends on: the weights, the optimizer's state "
                "(momentum, Adam moments, its step count), any learning-rate schedule and the data position")


def step_of(metrics: dict) -> int | None:
    """A report's step: its ``step``, else its ``iteration`` (what trainkit's report callbacks call it)."""
    step = metrics.get("step", metrics.get("iteration"))
    return None if step is None else int(step)


def _steps(reports: list[list[dict]]) -> list[int | None]:
    return [step_of(r[0]) for r in reports]


def _losses(reports: list[list[dict]]) -> dict[int | None, float]:
    """Rank 0's loss at each step."""
    return {step_of(r[0]): float(r[0]["loss"]) for r in reports}


def _same(a: dict[int, float], b: dict[int, float]) -> bool:
    return a.keys() == b.keys() and all(math.isclose(a[s], b[s], rel_tol=1e-6, abs_tol=1e-9) for s in a)


def _where(workers: int) -> str:
    return {0: "in local mode (num_workers=0)", 1: "at 1 worker (ScalingConfig()'s default)"}.get(
        workers, f"at {workers} workers")


class JourneyChecks:
    """Mixed into ``BackendConformance``."""

    #: ``journey(config)``: one small, deterministic training run through the plugin's own helpers, on
    #: every rank: build the model (seeded by ``config["seed"]``) and its optimizer; resume both from
    #: ``trainkit.get_checkpoint()`` where there is one; split ``config["rows"]`` (ints) with the
    #: plugin's data helper and build samples from them; train until ``config["steps"]`` steps are done
    #: in all, reporting ``{"step": n, "loss": float}`` (and, ideally, ``"rows"``: the rows this rank
    #: trained on) with a checkpoint of the model and optimizer, through the plugin's report callback
    #: or checkpoint IO. None: the journey probes fail; ``NOT_PROVIDED("why")``: they skip, listed.
    journey = None
    #: the framework's own launcher variables (``{"PADDLE_TRAINER_ID": "3"}``), set in the driver's
    #: environment with trainkit's list of common ones (``LAUNCHER_ENV``) by the launcher probe
    launcher_env: dict[str, str] = {}

    def _journey(self, run_config: Any, workers: int, steps: int, seed: int = 0, rc: dict | None = None,
                 **conditions: Any) -> list[list[dict]]:
        """The journey through the registered Trainer at ``workers`` workers, with ``run_config(**rc)``;
        every report."""
        journey = required_hook(type(self), "journey")
        trainer_cls, _ = registered_trainer(_entry_for(type(self.backend_config)))
        collect = _Collect()
        rc = run_config(**(rc or {}), callbacks=[collect])
        config = {"journey": journey, "steps": steps, "rows": list(range(JOURNEY_ROWS)), "seed": seed, **conditions}
        trainer_cls(_journey_fn, train_loop_config=config, backend_config=self.backend_config,
                    scaling_config=ScalingConfig(num_workers=workers), run_config=rc).fit()
        return collect.reports

    def _checked_journey(self, run_config: Any, workers: int, steps: int, label: str, **kwargs: Any) -> list:
        try:
            reports = self._journey(run_config, workers, steps, **kwargs)
        except TrainingFailedError as exc:
            hint = ("what attempt 0 left behind (a timer it armed, a global, a rendezvous) broke attempt 1: cancel and "
                    "undo it on every path out of setup" if label.startswith("retried") else
                    "a plugin's helpers must work at every world size, one worker and local mode included, and with "
                    "data that does not divide by the world size")
            raise AssertionError(
                f"{type(self).__name__}: {label}, the journey failed {_where(workers)}: {exc.error_type}: {exc} "
                f"{exc.worker_traceback or ''}\n{hint[0].upper() + hint[1:]}") from exc
        size = max(workers, 1)
        shapeless = [m for report in reports for m in report
                     if step_of(m) is None or not isinstance(m.get("loss"), (int, float))]
        assert not shapeless, (
            f"{type(self).__name__}: the journey reported {shapeless[:2]}: every report of the journey carries "
            '{"step": <steps done>, "loss": <float>} (or "iteration" for the step, as trainkit\'s report callbacks do)')
        assert _steps(reports) == list(range(1, steps + 1)), (
            f"{type(self).__name__}: {label}, {_where(workers)} the journey's reports reached the driver for steps "
            f"{_steps(reports)}, expected {list(range(1, steps + 1))}: every rank reports every step, in order")
        for report in reports:
            assert len(report) == size and len({step_of(m) for m in report}) == 1, (
                f"{type(self).__name__}: {label}, {_where(workers)} the ranks disagree on the step: {report}")
            if all("rows" in m for m in report):
                _check_shards(dict(enumerate(report)), f"{type(self).__name__}: {label}, {_where(workers)}, "
                                                       "the journey's data helper", JOURNEY_ROWS)
        return reports

    def _straight(self, run_config: Any, workers: int = 2, steps: int = 4, seed: int = 0) -> dict[int, float]:
        """The straight run's losses, once per suite class, world size, length and seed."""
        cache = type(self).__dict__.get("_straight_runs")
        if cache is None:
            cache = {}
            setattr(type(self), "_straight_runs", cache)
        key = (workers, steps, seed)
        if key not in cache:
            cache[key] = _losses(self._checked_journey(run_config, workers, steps, "the straight run", seed=seed))
        return cache[key]

    @_GUARDS
    def test_journey_runs_at_every_world_size(self, run_config) -> None:
        """The journey at 1, 2 and 3 workers with 7 rows: every rank reports every step, the rows cover
        the data, and the loss is the same at every world size (data-parallel training is)."""
        for workers in (1, 2, 3):
            self._checked_journey(run_config, workers, 2, "plainly")

    @_LOCAL_GUARDS
    def test_journey_runs_in_local_mode(self, run_config) -> None:
        self._checked_journey(run_config, 0, 2, "plainly")

    @_GUARDS
    def test_journey_failure_on_one_rank_reaches_the_caller(self, run_config) -> None:
        """Rank 1 fails at step 1, from inside the report the journey makes: the registered Trainer's
        ``fit()`` raises ``TrainingFailedError`` naming rank 1."""
        _, label = registered_trainer(_entry_for(type(self.backend_config)))
        try:
            reports = self._journey(run_config, 2, 2, fail=[1, 1])
        except TrainingFailedError as exc:
            assert exc.rank == 1 and "rank 1 fails at step 1 on purpose" in f"{exc} {exc.worker_traceback}", (
                f"{label}.fit() raised for another failure than rank 1's at step 1: {exc}")
            return
        raise AssertionError(
            f"{label}.fit() returned (reports for steps {_steps(reports)}) though rank 1 raised ValueError at step 1 "
            "of the journey: a failed run must reach the caller as TrainingFailedError. Never catch it in the "
            "Trainer, its fit() or the framework's callbacks (a callback that logs and goes on hides the failure)")

    @_GUARDS
    def test_journey_stopped_and_resumed_equals_the_straight_run(self, run_config) -> None:
        """Metamorphic: 2 steps, then a run resumed from its checkpoint to step 4, reports the straight
        4-step run's losses for steps 3 and 4."""
        straight = self._straight(run_config)
        name = f"journey-resumed-{uuid.uuid4().hex[:8]}"
        self._checked_journey(run_config, 2, 2, "stopped after 2 steps", rc={"name": name})
        resumed = self._journey(run_config, 2, 4, rc={"name": name})
        assert _steps(resumed) == [3, 4], (
            f"{type(self).__name__}: the journey resumed after step 2 reported steps {_steps(resumed)}, expected "
            "[3, 4]: resume from trainkit.get_checkpoint() and go on at the step after the saved one")
        expected = {s: straight[s] for s in (3, 4)}
        assert _same(_losses(resumed), expected), (
            f"{type(self).__name__}: the journey stopped after step 2 and resumed reported losses {_losses(resumed)} "
            f"for steps 3 and 4; the straight run {expected}: {_RESUME_HINT}")

    @_GUARDS
    def test_journey_retried_after_a_failed_first_attempt_equals_the_straight_run(self, run_config,
                                                                                    monkeypatch) -> None:
        """Attempt 0 fails, once on rank 0 after the backend set up, once half-way through setup (the
        backend's ``on_start`` done, then an error before training); attempt 1 (``max_failures=1``),
        after a wait of 3 s in which timers attempt 0 armed fire, must report the straight run's
        losses: nothing left from attempt 0 may change it."""
        straight = {s: loss for s, loss in self._straight(run_config).items() if s <= 2}
        rc = {"failure_config": trainkit.FailureConfig(max_failures=1)}
        backend_cls, on_start, calls = self.backend_config.backend_cls, self.backend_config.backend_cls.on_start, []

        def half_failing_on_start(backend, worker_group, backend_config) -> None:
            on_start(backend, worker_group, backend_config)
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("conformance: setup fails on purpose after on_start, in attempt 0")

        for how, conditions in (("after attempt 0 failed in training", {"fail_first_attempt": True}),
                                ("after attempt 0's setup half failed", {"hold_s": 4.0})):
            if "hold_s" in conditions:  # the setup half fails
                monkeypatch.setattr(backend_cls, "on_start", half_failing_on_start)
            label = f"retried {how}"
            reports = self._checked_journey(run_config, 2, 2, label, rc=rc, **conditions)
            assert _same(_losses(reports), straight), (
                f"{type(self).__name__}: {label}, attempt 1 reported losses {_losses(reports)}; the straight run "
                f"{straight}: what attempt 0 left (a timer, a rendezvous, a framework global, a checkpoint half "
                "written) changed attempt 1. Undo everything on_start set up in on_shutdown, key per-attempt state "
                "by trainkit.get_context().get_attempt(), and cancel timers on every path out of setup")

    @_GUARDS
    def test_journey_with_launcher_variables_in_the_drivers_environment(self, run_config, monkeypatch) -> None:
        """A launcher's variables (``LAUNCHER_ENV`` and the suite's ``launcher_env``) in the driver's
        environment change no run: local mode and 2 workers report the straight runs' losses."""
        straight = {workers: self._straight(run_config, workers, 2) for workers in (0, 2)}
        variables = {**LAUNCHER_ENV, **type(self).launcher_env}
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        for workers in (0, 2):
            label = "with a launcher's variables in the driver's environment"
            losses = _losses(self._checked_journey(run_config, workers, 2, label))
            assert _same(losses, straight[workers]), (
                f"{type(self).__name__}: {label} ({', '.join(f'{k}={v}' for k, v in type(self).launcher_env.items())}"
                f"{' and ' if type(self).launcher_env else ''}trainkit's LAUNCHER_ENV), the journey {_where(workers)} "
                f"reported losses {losses}; without them {straight[workers]}: trainkit's ranks, world size and "
                "addresses must win over variables a launcher left in the user's environment (set them for the "
                "framework on the workers from trainkit.get_context(); never read them from os.environ)")

    @_GUARDS
    def test_two_journeys_at_once_on_one_host(self, run_config, tmp_path) -> None:
        """Two journeys at once (seeds 0 and 1, in two threads, starting together), each then resumed from its own last
        checkpoint to step 3: each reports its own straight run's losses (checkpoint saves that share a
        path on the host mix the runs' states)."""
        straight = {seed: self._straight(run_config, 2, 3, seed) for seed in (0, 1)}
        names, errors = {seed: f"journey-{seed}-{uuid.uuid4().hex[:8]}" for seed in (0, 1)}, {}
        sync = tmp_path / "sync"
        sync.mkdir()

        def run(seed: int) -> None:
            try:
                self._journey(run_config, 2, 2, seed=seed, rc={"name": names[seed]}, sync=str(sync))
            except Exception as exc:  # noqa: BLE001 - reported below
                errors[seed] = exc
                (sync / f"ready{seed}").touch()  # the other run stops waiting for this one

        _both_at_once(run, "conformance-journey")
        for seed, exc in errors.items():
            raise AssertionError(f"{type(self).__name__}: journey {seed} of two at once on one host failed: "
                                 f"{type(exc).__name__}: {exc}. Two jobs on one host must not collide: ports from "
                                 "free_address()/rendezvous(), files in directories of the run's own") from exc
        for seed in (0, 1):
            resumed = _losses(self._journey(run_config, 2, 3, seed=seed, rc={"name": names[seed]}))
            assert _same(resumed, {3: straight[seed][3]}), (
                f"{type(self).__name__}: journey {seed} of two at once on one host, resumed from its own last "
                f"checkpoint, reported step 3's loss {resumed}; its straight run {straight[seed][3]}: the runs' "
                "checkpoints mixed. Save each checkpoint in a directory of its own (tempfile.TemporaryDirectory()), "
                "never a fixed path shared by every run on the host")
