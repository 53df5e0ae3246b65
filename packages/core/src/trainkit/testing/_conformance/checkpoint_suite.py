"""``CheckpointConformance``: what every ``CheckpointIO`` must do, in process and through runs."""

from __future__ import annotations

import os
from typing import Any, Callable, ClassVar

import pytest

import trainkit
from trainkit import (
    Checkpoint,
    CheckpointCorruptError,
    CheckpointIO,
    DataParallelTrainer,
    ScalingConfig,
    TrainingFailedError,
)
from trainkit.testing._conformance.guards import GUARDS as _GUARDS
from trainkit.testing._conformance.hooks import _takes_seed, _warn_once, required_hook
from trainkit.testing._conformance.worker_fns import _resume_fn, _save_and_report_fn


def _fit_two(train_fn: Callable, config: dict, run_config: trainkit.RunConfig) -> trainkit.Result:
    return DataParallelTrainer(train_fn, train_loop_config=config, scaling_config=ScalingConfig(num_workers=2),
                               run_config=run_config).fit()



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
    #: test process). None: the probe fails; ``NOT_PROVIDED("why")``: it skips, listed.
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
        resume, states = required_hook(type(self), "resume"), self._states()
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



def _saves(config: dict) -> list[int]:
    """The ranks that reported a checkpoint, one entry per report, in rank order."""
    return sorted(int(name.split("-")[0]) for name in os.listdir(config["saves"]))
