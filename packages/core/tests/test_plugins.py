"""The entry-point loader, tested against real (generated) installed distributions in a fresh process."""

import ast
import json
import os
import pathlib
import sys
import textwrap

import pytest

from trainkit.testing import subprocesses

GOOD = '''
from dataclasses import dataclass
from trainkit import BackendConfig, hookimpl

FRAMEWORK = {framework!r}

@dataclass
class ToyConfig(BackendConfig):
    pass

@hookimpl
def trainkit_register_backends(registry):
    registry.register({backend!r}, ToyConfig)
'''


def make_dist(site, name, module_source, requires=(), entry=None):
    """Write an installed distribution ``name`` with one module and a trainkit.plugins entry point."""
    module = f"{name.replace('-', '_')}_plugin"
    (site / f"{module}.py").write_text(textwrap.dedent(module_source))
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"  # as wheels name it
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: %s\nVersion: 1.0\n%s" % (
        name, "".join(f"Requires-Dist: {r}\n" for r in requires)))
    (info / "entry_points.txt").write_text(f"[trainkit.plugins]\n{entry or name} = {module}\n")


def load(site, **env):
    code = textwrap.dedent("""
        import json, dataclasses
        from trainkit._internal.plugins import get_plugins
        p = get_plugins()
        print(json.dumps({"infos": {k: dataclasses.asdict(v) for k, v in p.infos.items()},
                          "backends": {k: e.plugin for k, e in p.backends.entries.items()}}))
    """)
    full_env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **env}
    out = subprocesses.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def site(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    make_dist(site, "toy-good", GOOD.format(framework="pluggy", backend="toy"), requires=["pluggy>=1.0"],
              entry="toy")
    make_dist(site, "toy-broken", "raise ImportError('boom at import')", entry="broken")
    make_dist(site, "toy-typo", "from trainkit import hookimpl\n\n@hookimpl\ndef trainkit_register_backend(registry):\n"
              "    pass\n", entry="typo")
    make_dist(site, "toy-raises", "from trainkit import hookimpl\n\n@hookimpl\ndef trainkit_register_backends(registry):"
              "\n    registry.register('half', object)\n    raise RuntimeError('register failed')\n", entry="raises")
    make_dist(site, "toy-nofw", GOOD.format(framework="no-such-framework", backend="nofw"), entry="nofw")
    make_dist(site, "toy-oldfw", GOOD.format(framework="pluggy", backend="oldfw"), requires=["pluggy<1.0"],
              entry="oldfw")
    return site


def test_broken_plugins_are_isolated_and_reasons_given(site):
    result = load(site)
    infos, backends = result["infos"], result["backends"]
    assert backends.get("toy") == "toy" and infos["toy"]["status"] == "loaded"
    assert infos["toy"]["framework"] == "pluggy" and infos["toy"]["distribution"] == "toy-good"
    assert infos["broken"]["status"] == "error" and "boom at import" in infos["broken"]["reason"]
    assert infos["typo"]["status"] == "error" and "trainkit_register_backend" in infos["typo"]["reason"]
    assert infos["raises"]["status"] == "error" and "half" not in backends
    assert infos["nofw"]["status"] == "skipped" and "no-such-framework is not installed" in infos["nofw"]["reason"]
    assert infos["oldfw"]["status"] == "skipped" and "outside the supported range <1.0" in infos["oldfw"]["reason"]


def make_site(tmp_path, *dists):
    site = tmp_path / "site"
    site.mkdir()
    for name, entry, backend in dists:
        make_dist(site, name, GOOD.format(framework="pluggy", backend=backend), entry=entry)
    return site


@pytest.mark.parametrize("impostor_entry", ["aaa", "zzz"])  # loads before and after the real 'mid'
def test_a_plugin_registering_another_plugins_backend_is_the_error_whatever_the_load_order(tmp_path, impostor_entry):
    site = make_site(tmp_path, ("real-mid", "mid", "mid"), ("impostor", impostor_entry, "mid"))
    result = load(site, TRAINKIT_PLUGINS=f"mid,{impostor_entry}")
    assert result["backends"] == {"mid": "mid"}
    assert result["infos"]["mid"]["status"] == "loaded"
    impostor = result["infos"][impostor_entry]
    assert impostor["status"] == "error"
    assert f"registers backend 'mid', but a plugin registers only the backend its entry point names " \
           f"('{impostor_entry}')" in impostor["reason"]


def test_two_plugins_claiming_one_backend_are_both_errors_and_the_backend_refuses_to_guess(tmp_path):
    site = make_site(tmp_path, ("mid-one", "mid", "mid"), ("mid-two", "mid", "mid"),
                     ("sub-one", "sub", "sub_x"), ("sub-x", "sub_x", "sub_x"))
    result = load(site, TRAINKIT_PLUGINS="mid,sub,sub_x")
    assert result["backends"] == {}
    by_dist = {info["distribution"]: info for info in result["infos"].values()}
    assert by_dist["mid-one"]["status"] == by_dist["mid-two"]["status"] == "error"
    assert "backend 'mid' is also registered by mid-two (entry point 'mid')" in by_dist["mid-one"]["reason"]
    assert "backend 'mid' is also registered by mid-one (entry point 'mid')" in by_dist["mid-two"]["reason"]
    assert by_dist["sub-one"]["status"] == by_dist["sub-x"]["status"] == "error"  # a clash between two entry names
    code = ("import trainkit\ntry:\n    trainkit.Trainer(lambda: None, backend='mid')\n"
            "except ValueError as e:\n    print(e)\n")
    env = {**os.environ, "PYTHONPATH": str(site), "TRAINKIT_PLUGINS": "mid"}
    out = subprocesses.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert ("Backend 'mid' is registered by more than one plugin: mid-one (entry point 'mid') and mid-two "
            "(entry point 'mid'). trainkit will not guess") in out
    table = subprocesses.run([sys.executable, "-m", "trainkit.cli", "plugins", "--json"], env=env,
                             capture_output=True, text=True, check=True).stdout
    rows = [(row["distribution"], row["status"]) for row in json.loads(table) if row["name"] == "mid"]
    assert sorted(rows) == [("mid-one", "error"), ("mid-two", "error")]


def test_allow_and_deny_lists(site):
    denied = load(site, TRAINKIT_DISABLED_PLUGINS="toy,broken")
    assert denied["infos"]["toy"]["status"] == "disabled" and "toy" not in denied["backends"]
    assert "TRAINKIT_DISABLED_PLUGINS" in denied["infos"]["toy"]["reason"]
    allowed = load(site, TRAINKIT_PLUGINS="toy")
    assert allowed["infos"]["toy"]["status"] == "loaded"
    assert allowed["infos"]["broken"]["status"] == "disabled"
    no_auto = load(site, TRAINKIT_DISABLE_PLUGIN_AUTOLOAD="1")
    assert {i["status"] for i in no_auto["infos"].values()} == {"disabled"}
    no_auto_but_allowed = load(site, TRAINKIT_DISABLE_PLUGIN_AUTOLOAD="1", TRAINKIT_PLUGINS="toy")
    assert no_auto_but_allowed["infos"]["toy"]["status"] == "loaded"


def test_unknown_backend_lists_installed_and_suggests_package(site):
    code = ("import trainkit\ntry:\n    trainkit.Trainer(lambda: None, backend='jax')\n"
            "except ValueError as e:\n    print(e)\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocesses.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "Unknown backend 'jax'" in out and "toy" in out and "pip install trainkit-jax" in out
    assert "in a clone of the trainkit repository: pip install -e packages/core -e packages/jax" in out  # not published
    raised = subprocesses.run([sys.executable, "-c", "import trainkit\ntrainkit.Trainer(lambda: None, backend='jax')"],
                              env=env, capture_output=True, text=True)
    assert raised.stderr.splitlines()[-1].startswith("trainkit.errors.UnknownBackendError: Unknown backend 'jax'")
    code = code.replace("'jax'", "'oldfw'")
    out = subprocesses.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert "installed but skipped" in out and "<1.0" in out
    out = subprocesses.run([sys.executable, "-c", code.replace("'oldfw'", "'tyo'")], env=env, capture_output=True,
                           text=True, check=True).stdout
    assert "Did you mean 'toy'?" in out and "pip install trainkit-tyo" not in out  # no trainkit-tyo exists
    out = subprocesses.run([sys.executable, "-c", code.replace("'oldfw'", "'nosuchfw'")], env=env, capture_output=True,
                           text=True, check=True).stdout
    assert "Unknown backend 'nosuchfw'" in out and "pip install trainkit-nosuchfw" not in out
    # the backend may be a plugin's that did not load under another entry name: every reason is shown
    assert "Plugin toy-nofw (entry point 'nofw') skipped: no-such-framework is not installed" in out
    assert "Plugin toy-broken (entry point 'broken') error: ImportError: boom at import." in out


def test_a_plugin_that_fails_is_logged_with_its_traceback(site):
    code = "import logging\nlogging.basicConfig()\nfrom trainkit._internal.plugins import get_plugins\nget_plugins()\n"
    env = {**os.environ, "PYTHONPATH": str(site)}
    err = subprocesses.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stderr
    assert "trainkit plugin 'broken' failed and was skipped: ImportError: boom at import" in err
    assert "Traceback (most recent call last)" in err and "toy_broken_plugin.py" in err


def test_cli_lists_plugins(site):
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocesses.run([sys.executable, "-m", "trainkit.cli", "plugins", "--json"], env=env,
                           capture_output=True, text=True, check=True).stdout
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["toy"]["backends"] == ["toy"] and rows["toy"]["version"] == "1.0"
    assert rows["broken"]["status"] == "error"
    table = subprocesses.run([sys.executable, "-m", "trainkit.cli", "plugins"], env=env,
                             capture_output=True, text=True, check=True).stdout
    assert "toy-good" in table and "skipped" in table


OLD_HOOK = '''
from trainkit import hookimpl

@hookimpl
def trainkit_after_report(index, metrics, all_metrics, checkpoint):
    pass
'''


def test_a_plugin_implementing_a_removed_hook_is_an_error_that_names_the_replacement(site):
    make_dist(site, "org-events", OLD_HOOK, entry="events")
    result = load(site)
    events = result["infos"]["events"]
    assert events["status"] == "error"
    assert ("it implements trainkit_after_report, which trainkit 0.1 removed: have the user pass a "
            "trainkit.UserCallback in RunConfig(callbacks=[...])") in events["reason"]
    assert result["infos"]["toy"]["status"] == "loaded"  # the others are unaffected


def test_every_hook_trainkit_calls_has_a_first_party_implementation():
    """No extension point without a user: read from the repository's plugin sources, so it holds
    wherever the tests run, whichever plugins are installed."""
    from trainkit import hookspecs

    packages = pathlib.Path(__file__).resolve().parents[2]
    implemented = {node.name for source in packages.glob("*/src/trainkit_*/_plugin.py")
                   for node in ast.walk(ast.parse(source.read_text())) if isinstance(node, ast.FunctionDef)
                   and any(getattr(d, "id", None) == "hookimpl" for d in node.decorator_list)}
    specs = {name for name in dir(hookspecs) if name.startswith("trainkit_")}
    assert len(list(packages.glob("*/src/trainkit_*/_plugin.py"))) == 9
    assert specs - implemented == set()
