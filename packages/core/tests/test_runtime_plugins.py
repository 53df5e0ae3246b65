"""Core without its runtime plugin (trainkit-warm): ``import trainkit`` loads none of it, and
``trainkit up`` / ``down`` say which install adds them. Holds whether or not trainkit-warm is
installed: the plugin is turned off (``TRAINKIT_DISABLED_PLUGINS``) where the test needs it absent."""

from __future__ import annotations

import json
import os
import sys

import pytest

from trainkit.testing import subprocesses


def test_import_trainkit_imports_no_runtime_plugin_nor_cloudpickle():
    code = ("import json, sys, trainkit\n"
            "before = sorted(m for m in sys.modules if m.split('.')[0] in ('trainkit_warm', 'cloudpickle', 'ray'))\n"
            "from trainkit._internal.plugins import get_plugins\n"
            "get_plugins()\n"  # loading the plugins imports only their hooks' modules
            "after = sorted(m for m in sys.modules if m.split('.')[0] in ('cloudpickle', 'ray'))\n"
            "print(json.dumps([before, after]))\n")
    out = subprocesses.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == [[], []]


@pytest.mark.parametrize("command", [["up"], ["up", "--idle-timeout", "5m", "--json"], ["down"], ["up", "--help"]])
def test_up_and_down_without_trainkit_warm_say_which_pip_install_adds_them(command):
    env = {**os.environ, "TRAINKIT_DISABLED_PLUGINS": "warm"}
    proc = subprocesses.run([sys.executable, "-m", "trainkit.cli", *command], env=env, capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"trainkit {command[0]}: the warm local cluster is the trainkit-warm package" in proc.stderr
    assert "pip install trainkit-warm" in proc.stderr and proc.stdout == ""


def test_the_old_name_of_trainkit_spare_workers_still_turns_them_off_with_a_deprecation_warning(monkeypatch):
    from trainkit._internal.worker import spare

    monkeypatch.delenv("TRAINKIT_SPARE_WORKERS", raising=False)
    monkeypatch.setenv("TRAINKIT_WARM_WORKERS", "0")
    with pytest.warns(DeprecationWarning, match="TRAINKIT_WARM_WORKERS is now TRAINKIT_SPARE_WORKERS"):
        assert not spare.turned_on()
    monkeypatch.setenv("TRAINKIT_SPARE_WORKERS", "1")  # the new name wins, and says nothing
    assert spare.turned_on()


TOY_RUNTIME = '''
from trainkit import Result, hookimpl

@hookimpl
def trainkit_hand_off_fit(run):
    return Result(metrics={"ran": "elsewhere", "name": run["run_config"].name}, checkpoint=None, path="/nowhere")

def _hello(args):
    print("hello from", args.command)
    return 0

@hookimpl
def trainkit_cli_commands(subcommands):
    subcommands.add_parser("up").set_defaults(func=_hello)
'''


def test_a_runtime_plugin_found_by_its_entry_point_runs_the_fit_elsewhere_and_adds_commands(tmp_path):
    """The runtime extension point on its own, with a toy runtime plugin (no trainkit-warm): core
    finds it in the entry-point group ``trainkit.runtimes``, ``fit()`` returns what its
    ``trainkit_hand_off_fit`` returned without importing Ray, and its ``up`` replaces core's hint."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "toy_runtime.py").write_text(TOY_RUNTIME)
    info = site / "toy_runtime-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-runtime\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[trainkit.runtimes]\ntoy = toy_runtime\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
           "TRAINKIT_DISABLED_PLUGINS": "warm"}
    code = ("import json, sys, trainkit\n"
            "result = trainkit.DataParallelTrainer(lambda: None, run_config=trainkit.RunConfig(name='toy')).fit()\n"
            "print(json.dumps([result.metrics, 'ray' in sys.modules]))\n")
    out = subprocesses.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == [{"ran": "elsewhere", "name": "toy"}, False]
    up = subprocesses.run([sys.executable, "-m", "trainkit.cli", "up"], env=env, capture_output=True, text=True)
    assert (up.returncode, up.stdout) == (0, "hello from up\n")
    listed = subprocesses.run([sys.executable, "-m", "trainkit.cli", "plugins", "--json"], env=env, capture_output=True,
                              text=True, check=True).stdout
    assert {row["name"]: row["status"] for row in json.loads(listed)}["toy"] == "loaded"
