"""The checks of ``BackendConformance`` on the plugin's Trainer and report callback: every way to
build the Trainer fits with the user's configs, and every rank's report reaches the driver."""

from __future__ import annotations

import functools
import os
from typing import Callable

import trainkit
from trainkit import ScalingConfig, TrainingFailedError
from trainkit.testing._conformance.checks import _check_ranks
from trainkit.testing._conformance.guards import GUARDS as _GUARDS
from trainkit.testing._conformance.hooks import _MARK, _config_keyword, _marked, _record_on_start, required_hook
from trainkit.testing._conformance.metadata import _entry_for
from trainkit.testing._conformance.worker_fns import _Collect, _fails_once_fn, _ranks_fn, _report_callback_fn


def registered_trainer(entry) -> tuple[Callable, str]:
    """The Trainer the registration names (else ``trainkit.Trainer(fn, backend=<name>)``), and its label."""
    if entry.trainer_cls is not None:
        return entry.trainer_cls, f"the registered {entry.trainer_cls.__qualname__}"
    return functools.partial(trainkit.Trainer, backend=entry.name), f"trainkit.Trainer(fn, backend={entry.name!r})"


class TrainerChecks:
    """Mixed into ``BackendConformance``."""

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
        trainer_cls, label = registered_trainer(entry)
        collect = _Collect()
        rc = run_config(failure_config=trainkit.FailureConfig(max_failures=1), callbacks=[collect])
        trainer = trainer_cls(_fails_once_fn, train_loop_config=self._config(),
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
        callback = required_hook(type(self), "report_callback")
        reports = self._fit(_report_callback_fn, run_config, report_callback=callback)
        assert len(reports) == 3 and all(len(r) == self.num_workers for r in reports), (
            f"3 steps reported through report_callback on {self.num_workers} ranks reached the driver as "
            f"{len(reports)} report(s) (ranks per report: {[len(r) for r in reports]}): every rank must call "
            "trainkit.report at every step (the ranks' reports are gathered into one); a callback that reports "
            "on rank 0 alone has every report dropped. Save the checkpoint on rank 0 alone, report on every rank")
