"""What a framework plugin builds its checkpoint helper and report callback on: ``CheckpointIO``
(state to files and back, verified), ``ModelFileCheckpointIO`` (a model that saves itself to one
file), ``resume_file`` (a resume helper's verified local path), ``MetricNames`` and
``ReportCallbackBase`` (a round-based framework's report callback). See docs/extending.md."""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any, ClassVar, Iterator

from trainkit._internal import moved
from trainkit._internal.storage import checkpoint_files
from trainkit.checkpoint import Checkpoint
from trainkit.context import get_checkpoint, get_context, report
from trainkit.validation import check_int

__all__ = ["CheckpointIO", "MetricNames", "ModelFileCheckpointIO", "ReportCallbackBase", "resume_file"]


class CheckpointIO:
    """How a framework's state goes into a checkpoint directory and comes back out.

    A plugin subclasses it and overrides ``save`` and ``load_from_directory``; ``load`` verifies a
    committed checkpoint against its manifest first, so a torn or altered file is never loaded.
    ``trainkit.testing.CheckpointConformance`` checks an implementation.

    Example::

        class NumpyCheckpointIO(trainkit.CheckpointIO):
            def save(self, state, directory):
                np.save(os.path.join(directory, "state.npy"), state)

            def load_from_directory(self, directory):
                return np.load(os.path.join(directory, "state.npy"))

        io = NumpyCheckpointIO()
        with tempfile.TemporaryDirectory() as tmp:
            io.save(weights, tmp)
            trainkit.report(metrics, checkpoint=Checkpoint.from_directory(tmp))
        weights = io.load(trainkit.get_checkpoint())
    """

    @staticmethod
    def check_filename(filename: str) -> str:
        """``filename`` if it is a plain file name a checkpoint may hold, else ``ValueError``."""
        if not isinstance(filename, str) or not filename or filename.startswith(".") or "/" in filename:
            raise ValueError(f"filename={filename!r} is invalid: expected a plain file name not starting "
                             "with '.' (trainkit's own files do)")
        return filename

    def save(self, state: Any, directory: str) -> None:
        """Write ``state`` as files into the existing local ``directory``."""
        raise NotImplementedError

    def load_from_directory(self, directory: str) -> Any:
        """Read back what ``save`` wrote into the local ``directory``."""
        raise NotImplementedError

    def report(self, metrics: dict[str, Any], state: Any) -> None:
        """``trainkit.report(metrics)`` on every rank, with a checkpoint of ``state`` saved by rank 0:
        for states every rank holds identically (data-parallel replicas, a shared booster)."""
        if get_context().get_world_rank() != 0:
            report(metrics)
            return
        with tempfile.TemporaryDirectory() as tmp:
            self.save(state, tmp)
            report(metrics, checkpoint=Checkpoint.from_directory(tmp))

    def load(self, checkpoint: Checkpoint) -> Any:
        """Verify ``checkpoint`` if it was committed (a manifest exists), then load it."""
        if checkpoint_files.read_manifest(checkpoint.filesystem, checkpoint.path) is not None:
            checkpoint.verify()
        with checkpoint.as_directory() as path:
            return self.load_from_directory(path)


class ModelFileCheckpointIO(CheckpointIO):
    """A model that writes itself to one file with ``save_model(path)`` (XGBoost's and LightGBM's
    Boosters). A subclass sets ``default_filename`` and reads the file back in ``load_model``.

    Example::

        class LightGBMCheckpointIO(trainkit.ModelFileCheckpointIO):
            default_filename = "model.txt"

            def load_model(self, path):
                return lightgbm.Booster(model_file=path)
    """

    default_filename: str

    def __init__(self, filename: str | None = None):
        self.filename = self.check_filename(filename or self.default_filename)

    def save(self, state: Any, directory: str) -> None:
        state.save_model(os.path.join(directory, self.filename))

    def load_from_directory(self, directory: str) -> Any:
        return self.load_model(os.path.join(directory, self.filename))

    def load_model(self, path: str) -> Any:
        """The model saved at ``path``."""
        raise NotImplementedError


@contextlib.contextmanager
def resume_file(name: str, written_by: str, checkpoint: Checkpoint | None = None) -> Iterator[str | None]:
    """For a plugin's resume helper: a local path to file (or directory) ``name`` of ``checkpoint``
    (default: ``trainkit.get_checkpoint()``), verified against its manifest; None on a fresh start.
    A checkpoint without ``name`` raises FileNotFoundError naming ``written_by``, the writer expected.

    Example::

        with resume_file("checkpoint.ckpt", "trainkit_lightning.ReportCallback") as ckpt_path:
            trainer.fit(model, ckpt_path=ckpt_path)
    """
    if checkpoint is None:
        checkpoint = get_checkpoint()
    if checkpoint is None:
        yield None
        return
    checkpoint.verify()
    with checkpoint.as_directory() as directory:
        path = os.path.join(directory, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"checkpoint {checkpoint.path} holds no {name}: it was not written by {written_by}")
        yield path


class MetricNames:
    """Which of a framework's results a plugin's report callback reports, and under which names:
    None (all of them), a name, a list of names, or ``{reported_name: framework_name}``.

    Example::

        names = MetricNames({"loss": "train-logloss"}, framework="XGBoost")
        trainkit.report(names.select({"train-logloss": 0.3, "train-error": 0.1}))   # {"loss": 0.3}
    """

    def __init__(self, metrics: str | list[str] | tuple[str, ...] | dict[str, str] | None, framework: str):
        if isinstance(metrics, str):
            metrics = [metrics]
        if isinstance(metrics, (list, tuple)):
            metrics = {name: name for name in metrics}
        if metrics is not None and not (isinstance(metrics, dict) and all(
                isinstance(k, str) and isinstance(v, str) for k, v in metrics.items())):
            raise ValueError(f"metrics={metrics!r} is invalid: expected None, a name, a list of names or a dict "
                             "{reported_name: framework_name}")
        self.mapping, self.framework = metrics, framework

    def select(self, results: dict[str, Any]) -> dict[str, Any]:
        if self.mapping is None:
            return dict(results)
        missing = [name for name in self.mapping.values() if name not in results]
        if missing:
            raise KeyError(f"ReportCallback(metrics=...) names {missing}, "
                           f"but {self.framework} reported {sorted(results)}")
        return {key: results[name] for key, name in self.mapping.items()}


class ReportCallbackBase:
    """What a plugin's round-based report callback shares: which metrics, the checkpoint every
    ``frequency`` rounds and at the end, saved by rank 0 through ``checkpoint_io_cls``, and
    ``get_model`` to load it back. The subclass (also deriving from the framework's callback class)
    calls ``report`` from the framework's hook.

    Example::

        class ReportCallback(ReportCallbackBase, xgboost.callback.TrainingCallback):
            CHECKPOINT_NAME = "model.ubj"
            checkpoint_io_cls = XGBoostCheckpointIO
            framework = "XGBoost"

            def after_iteration(self, model, epoch, evals_log):
                rounds = model.num_boosted_rounds()
                self.report({**results_of(evals_log), "iteration": rounds}, model, self.checkpoint_due(rounds))
    """

    CHECKPOINT_NAME: ClassVar[str]  # the default model file in the checkpoint
    checkpoint_io_cls: ClassVar[type[CheckpointIO]]
    framework: ClassVar[str]  # named in errors

    def __init__(self, metrics: str | list[str] | dict[str, str] | None = None, filename: str | None = None,
                 frequency: int = 0, checkpoint_at_end: bool = True):
        check_int("frequency", frequency, 0, "0: only at the end")
        self._metrics = MetricNames(metrics, framework=self.framework)
        self._io = self.checkpoint_io_cls(filename or self.CHECKPOINT_NAME)
        self._frequency, self._checkpoint_at_end = frequency, checkpoint_at_end

    @classmethod
    def get_model(cls, checkpoint: "Checkpoint", filename: str | None = None) -> Any:
        """The model in a checkpoint this callback reported, verified against its manifest."""
        return cls.checkpoint_io_cls(filename or cls.CHECKPOINT_NAME).load(checkpoint)

    def checkpoint_due(self, rounds: int, last: bool = False) -> bool:
        """Whether the report after ``rounds`` rounds carries a checkpoint."""
        return (bool(self._frequency) and rounds % self._frequency == 0) or (last and self._checkpoint_at_end)

    def report(self, metrics: dict[str, Any], model: Any, with_checkpoint: bool) -> None:
        """``trainkit.report(metrics)`` on every rank; with a checkpoint of ``model`` saved by rank 0."""
        if with_checkpoint:
            self._io.report(metrics, model)
        else:
            report(metrics)


# What moved here from trainkit.callbacks and trainkit.checkpoint, given out there too (deprecated)
moved.provide(__name__, globals())
