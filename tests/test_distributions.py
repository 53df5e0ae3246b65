"""Every first-party plugin has the shape the conventions promise: one distribution per framework (or
runtime: trainkit-warm), named and wired the same way, a core extra naming it, a test matrix with the
oldest supported and latest versions, and (a framework's) tests that run trainkit.testing's
conformance suites."""

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).parent.parent
REPOSITORY = "https://github.com/trainkit/trainkit"
CORE = tomllib.loads((ROOT / "packages" / "core" / "pyproject.toml").read_text())
PLUGINS = sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml") if p.parent.name != "core")
# Every pyproject a user may build or copy: the distributions, the plugin template, the third-party fixture.
PYPROJECTS = sorted([*ROOT.glob("packages/*/pyproject.toml"), ROOT / "templates" / "plugin" / "pyproject.toml",
                     ROOT / "tests" / "fixtures" / "thirdparty_plugin" / "pyproject.toml"])


def test_there_are_plugins():
    assert PLUGINS


@pytest.mark.parametrize("package", PLUGINS, ids=lambda p: p.name)
def test_plugin_layout(package):
    name = package.name
    project = tomllib.loads((package / "pyproject.toml").read_text())
    meta = project["project"]
    assert meta["name"] == f"trainkit-{name}"
    assert meta["version"] == CORE["project"]["version"]
    major_minor = ".".join(CORE["project"]["version"].split(".")[:2])
    assert f"trainkit-core=={major_minor}.*" in meta["dependencies"]
    runtime = "trainkit.runtimes" in meta["entry-points"]  # a runtime plugin (trainkit-warm), not a framework
    group = "trainkit.runtimes" if runtime else "trainkit.plugins"
    assert meta["entry-points"] == {group: {name: f"trainkit_{name}._plugin"}}
    assert (package / "src" / f"trainkit_{name}" / "_plugin.py").is_file()
    assert (package / "README.md").is_file()

    extras = CORE["project"]["optional-dependencies"]
    assert extras[name] == [f"trainkit-{name}=={major_minor}.*"]
    assert f"trainkit-{name}=={major_minor}.*" in extras["all"]

    rows = project["tool"]["trainkit"]["test-matrix"]
    assert len(rows) >= 2, "test the oldest supported and the latest release"
    assert sum(bool(row.get("ci")) for row in rows) == 1

    tests = "".join(p.read_text() for p in (package / "tests").glob("test_*.py"))
    if runtime:
        return  # no backend: its own tests run it with real processes
    assert "BackendConformance" in tests
    source = "".join(p.read_text() for p in (package / "src").rglob("*.py"))
    if "(CheckpointIO)" in source:  # a framework checkpoint helper (Lightning writes its own: none)
        assert "CheckpointConformance" in tests


@pytest.mark.parametrize("pyproject", PYPROJECTS, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_nothing_is_named_or_needs_the_index_s_trainkit(pyproject):
    """``trainkit`` on the package index is an unrelated project: no distribution of ours is named so,
    and none depends on it (an extra included); core is ``trainkit-core``."""
    meta = tomllib.loads(pyproject.read_text())["project"]
    assert canonicalize_name(meta["name"]) != "trainkit"
    requirements = [*meta.get("dependencies", []), *sum(meta.get("optional-dependencies", {}).values(), [])]
    needs_trainkit = [r for r in requirements if canonicalize_name(Requirement(r).name) == "trainkit"]
    assert not needs_trainkit, f"{pyproject} depends on the index's trainkit: {needs_trainkit}"


def test_core_is_trainkit_core():
    assert CORE["project"]["name"] == "trainkit-core"


@pytest.mark.parametrize("package", [ROOT / "packages" / "core", *PLUGINS], ids=lambda p: p.name)
def test_publishable_metadata(package):
    """What the index shows and a user's tools need; the packaging session checks the built files."""
    meta = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0" and (package / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    assert set(meta["urls"]) >= {"Homepage", "Source", "Issues", "Changelog"}
    assert all(url.startswith(REPOSITORY) for url in meta["urls"].values())
    assert "Typing :: Typed" in meta["classifiers"] and list((package / "src").glob("*/py.typed"))
    links = re.findall(r"\]\((?!https?://|#)([^)]*)\)", (package / meta["readme"]).read_text())
    assert not links, f"relative links are broken on the index's project page: {links}"
