"""A plugin written against the previous release's plugin API still works for one minor release
(docs/extending.md, "Stable"): tests/fixtures/legacy_plugin (frozen) imports the names that moved
to ``trainkit.framework`` from their old modules and overrides ``make_state(self)`` without a seed.
It gets the framework's own objects and passes its conformance suite, with DeprecationWarnings
that say what to change. (pyproject's filterwarnings ignore DeprecationWarning: each check here
asks for its warnings with pytest.warns.)"""

import importlib.util
import os
import sys
import warnings
from pathlib import Path

import pytest

import trainkit.framework
from trainkit.testing import CheckpointConformance, subprocesses

LEGACY = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "legacy_plugin"
MOVED = {"trainkit.callbacks": ["MetricNames", "ReportCallbackBase"],
         "trainkit.checkpoint": ["CheckpointIO", "ModelFileCheckpointIO", "resume_file"]}


@pytest.fixture
def legacy(monkeypatch):
    """trainkit_legacy imported afresh (so its imports run, and warn, in this test)."""
    monkeypatch.syspath_prepend(str(LEGACY / "src"))
    monkeypatch.delitem(sys.modules, "trainkit_legacy", raising=False)
    with pytest.warns(DeprecationWarning) as record:
        import trainkit_legacy
    return trainkit_legacy, [str(w.message) for w in record]


def test_the_plugin_imports_the_old_names_with_a_warning_naming_the_new_place(legacy):
    module, messages = legacy
    for name, old in [("MetricNames", "trainkit.callbacks"), ("CheckpointIO", "trainkit.checkpoint"),
                      ("resume_file", "trainkit.checkpoint")]:
        assert any(m.startswith(f"{old}.{name} moved to trainkit.framework.{name}: import it from "
                                "trainkit.framework") for m in messages), (name, messages)
    assert module.MetricNames is trainkit.framework.MetricNames
    assert module.resume_file is trainkit.framework.resume_file
    assert issubclass(module.JsonCheckpointIO, trainkit.framework.CheckpointIO)
    assert module.selected_metrics({"logloss": 0.3, "error": 0.1}, {"loss": "logloss"}) == {"loss": 0.3}


@pytest.mark.parametrize("old, name", [(old, name) for old, names in MOVED.items() for name in names])
def test_every_moved_name_is_the_frameworks_from_its_old_module(old, name):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=rf"^{old}\.{name} moved to trainkit\.framework\.{name}: ") as record:
        value = getattr(module, name)  # `import trainkit.callbacks as c; c.MetricNames`
    assert value is getattr(trainkit.framework, name)
    assert record[0].filename == __file__  # the warning points at the line that used the old name
    with pytest.raises(AttributeError, match=f"module '{old}' has no attribute 'NoSuchName'"):
        module.NoSuchName  # noqa: B018


def test_an_old_import_is_the_first_import_of_a_fresh_interpreter():
    """trainkit.checkpoint imports nothing of the layer above it: the names come from trainkit.framework,
    which ``import trainkit`` (run first by any ``import trainkit.X``) has imported."""
    code = ("from trainkit.checkpoint import resume_file\nfrom trainkit.callbacks import MetricNames\n"
            "import trainkit.framework as f\nassert (resume_file, MetricNames) == (f.resume_file, f.MetricNames)")
    out = subprocesses.run([sys.executable, "-W", "always::DeprecationWarning", "-c", code],
                           capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "trainkit.checkpoint.resume_file moved to trainkit.framework.resume_file" in out.stderr
    assert "trainkit.callbacks.MetricNames moved to trainkit.framework.MetricNames" in out.stderr


def _legacy_suite(legacy):
    """The plugin's conformance class, from its own test file (``legacy``: the plugin is importable)."""
    spec = importlib.util.spec_from_file_location("legacy_test_conformance", LEGACY / "tests" / "test_conformance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TestJsonCheckpointIO


def test_make_state_without_a_seed_runs_and_warns_once(legacy, tmp_path):
    suite = _legacy_suite(legacy)()
    with pytest.warns(DeprecationWarning, match=r"TestJsonCheckpointIO\.make_state\(\) takes no seed: add one, "
                                                r"make_state\(self, seed\)") as record:
        suite.test_round_trip_in_process(tmp_path)
    assert record[0].filename == str(LEGACY / "tests" / "test_conformance.py")  # the author's make_state
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # once per class
        states = suite._states()
    assert states[0] == states[1] == {"weights": [1.0, 2.0, 3.0], "step": 7}


def test_make_state_with_a_seed_is_called_with_it_and_does_not_warn():
    class Seeded(CheckpointConformance):
        def make_state(self, seed):
            return {"seed": seed}

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert Seeded()._states() == [{"seed": 0}, {"seed": 1}]


def test_the_legacy_conformance_suite_passes_but_for_the_hook_it_never_set(pytester, monkeypatch, legacy):
    """Its whole CheckpointConformance suite, on 2 real workers (which import the plugin too): what it
    was written for passes; the resume-helper probe, newer than the plugin, fails (never skips) with
    the exact line to add, or the opt-out to write."""
    pytester.makeconftest((LEGACY / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_conformance=(LEGACY / "tests" / "test_conformance.py").read_text())
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(LEGACY / "src"), os.environ.get("PYTHONPATH", "")]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--timeout=300")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines_random([
        "*DeprecationWarning: trainkit.callbacks.MetricNames moved to trainkit.framework.MetricNames*",
        "*DeprecationWarning: TestJsonCheckpointIO.make_state() takes no seed*",
        "*TestJsonCheckpointIO sets no `resume`, which this probe needs. Add to the class:",
        "*resume = staticmethod(lambda checkpoint: <the state your resume helper restores from `checkpoint`>)",
        '*resume = NOT_PROVIDED("why")*'])
