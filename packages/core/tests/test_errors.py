"""trainkit.errors is the one place every error a user can meet is listed; old import paths stay."""

import ast
from pathlib import Path

import trainkit
import trainkit.errors
import trainkit.result

SOURCE = Path(trainkit.__file__).parent


def raised_types() -> dict[str, str]:
    """Every exception or warning class defined in trainkit's source: name -> file."""
    found = {}
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    getattr(base, "id", getattr(base, "attr", "")).endswith(("Error", "Exception", "Warning"))
                    for base in node.bases):
                found[node.name] = str(path.relative_to(SOURCE))
    return found


def test_every_error_class_in_trainkit_is_exported_by_trainkit_errors():
    missing = {name: where for name, where in raised_types().items() if name not in trainkit.errors.__all__}
    assert not missing, f"add these to trainkit.errors (and its docs table): {missing}"
    for name in set(trainkit.errors.__all__) - {"FailureKind"}:
        assert issubclass(getattr(trainkit.errors, name), (Exception, Warning)), name


def test_old_import_paths_name_the_same_classes():
    from trainkit.context import CheckpointUploadMode, TrainContext

    for name in ("TrainingFailedError", "WorkerGroupError", "ControllerError", "PreemptionError"):
        assert getattr(trainkit.result, name) is getattr(trainkit.errors, name) is getattr(trainkit, name)
    assert TrainContext is trainkit.TrainContext is trainkit.context.TrainContext
    assert CheckpointUploadMode is trainkit.CheckpointUploadMode is trainkit.context.CheckpointUploadMode


def test_the_failures_trainkit_names_are_an_enum_that_reads_as_its_string():
    import json

    from trainkit._internal.storage import strict_json
    from trainkit.errors import FailureKind

    assert FailureKind.WORKER_DIED == "WorkerDied" and str(FailureKind.WORKER_STUCK) == "WorkerStuck"
    assert f"{FailureKind.PREEMPTED}" == "Preempted"  # messages, on every Python version
    assert json.loads(strict_json.dumps({"type": FailureKind.WORKER_HUNG})) == {"type": "WorkerHung"}
    info = trainkit.PreemptionInfo(deadline_ms=None, preempted_node_to_ranks={"node": [1]})
    assert trainkit.errors.PreemptionError(info).error_type is FailureKind.PREEMPTED


def test_the_errors_a_run_ends_with_survive_a_pickle():
    """A fit() handed to the warm cluster's spare driver gets its error back pickled, as a rank's
    reaches the driver: type, message and details intact."""
    import pickle

    info = trainkit.PreemptionInfo(deadline_ms=5, preempted_node_to_ranks={"node": [1]})
    for error in (trainkit.errors.TrainingFailedError("boom", rank=1, error_type="ValueError", worker_traceback="tb"),
                  trainkit.errors.WorkerGroupError("boom", {1: ValueError("bad batch")}, rank=1),
                  trainkit.errors.ControllerError("boom", OSError("disk")),
                  trainkit.errors.PreemptionError(info, True, {1: ValueError("x")}),
                  trainkit.errors.ScriptExitError("train.py", 5),
                  trainkit.errors.StorageError("write", "/runs/x", OSError(28, "No space left"))):
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error), error
        details = {k: v for k, v in vars(error).items() if not isinstance(v, (dict, BaseException))}
        assert {k: v for k, v in vars(copy).items() if k in details} == details, error
    assert pickle.loads(pickle.dumps(trainkit.errors.PreemptionError(info))).preemption_info == info
    spent = trainkit.errors.PreemptionError(info)
    spent.args = (f"{spent}; max_preemption_failures=0 spent",)  # as the driver words it when giving up
    assert str(pickle.loads(pickle.dumps(spent))) == str(spent)
