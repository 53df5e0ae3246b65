"""Run inside a fresh environment holding one installed distribution (``nox -s packaging``):
``python packaging_check.py DIST [PLUGIN...]``; or on the built files: ``python packaging_check.py
--built DIR`` fails unless every wheel holds LICENSE and py.typed, every sdist LICENSE, and no
README (the index's project page) has a relative link.

Fails unless DIST's installed files are this checkout's, every module of DIST imports with only its
declared dependencies present (extras' modules aside) and without a warning naming a missing module,
each named plugin's entry point loads (and each ``trainkit.runtimes`` one of DIST: trainkit-warm's),
and a 2-worker run works by backend name (core alone, or a runtime plugin: a plain DataParallelTrainer).
"""

import importlib
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import tarfile
import warnings
import zipfile
from email.parser import Parser
from pathlib import Path

EXTRAS_ONLY = ("trainkit.testing",)  # modules that need an extra (trainkit-core[testing])


def sources_of(dist: str) -> list[md.PackagePath]:
    return [f for f in md.distribution(dist).files or []
            if f.suffix == ".py" and not f.parts[0].endswith((".dist-info", ".data"))]


def modules_of(dist: str) -> list[str]:
    names = {".".join(f.parts)[: -len(".py")].removesuffix(".__init__") for f in sources_of(dist)}
    return sorted(n for n in names if not n.startswith(EXTRAS_ONLY))


def check_installed_from_this_checkout(dist: str) -> None:
    """Every installed source file is this checkout's: an installer's cache can hand back an earlier
    build of the same version (uv keeps find-links wheels by name and version)."""
    src = Path(__file__).parents[1] / "packages" / dist.removeprefix("trainkit-") / "src"
    stale = [str(f) for f in sources_of(dist) if not (src / f).is_file() or f.read_text() != (src / f).read_text()]
    assert not stale, f"{dist}: installed files differ from {src}: {stale}"


RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|#)([^)]*)\)", re.I)  # [text](target) without a scheme


def check_built(folder: str) -> None:
    wheels, sdists = sorted(Path(folder).glob("*.whl")), sorted(Path(folder).glob("*.tar.gz"))
    assert wheels and len(wheels) == len(sdists), f"wheels {wheels}, sdists {sdists}"
    for wheel in wheels:
        names = zipfile.ZipFile(wheel).namelist()
        assert any(re.fullmatch(r"[^/]+\.dist-info/licenses/LICENSE", n) for n in names), f"{wheel.name}: no LICENSE"
        assert any(n.endswith("/py.typed") for n in names), f"{wheel.name}: no py.typed"
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        readme = Parser().parsestr(zipfile.ZipFile(wheel).read(metadata).decode()).get_payload()
        links = RELATIVE_LINK.findall(readme)
        assert not links, f"{wheel.name}: the README has relative links (broken on the index): {links}"
    for sdist in sdists:
        names = tarfile.open(sdist).getnames()
        assert any(n.count("/") == 1 and n.endswith("/LICENSE") for n in names), f"{sdist.name}: no LICENSE"
    print(f"{len(wheels)} wheels and {len(sdists)} sdists: LICENSE, py.typed, README links absolute")


def train_fn():
    import trainkit

    ctx = trainkit.get_context()
    trainkit.report({"world": ctx.get_world_size()})


# A warning at import that names a missing module: a dependency the framework needs and the
# distribution does not declare (torch without numpy: "Failed to initialize NumPy: No module named 'numpy'").
MISSING_AT_IMPORT = re.compile(r"No module named|Failed to initialize")


def main(dist: str, *plugins: str) -> None:
    check_installed_from_this_checkout(dist)
    modules = modules_of(dist)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for module in modules:
            importlib.import_module(module)
    missing = [f"{w.category.__name__}: {w.message}" for w in caught if MISSING_AT_IMPORT.search(str(w.message))]
    assert not missing, f"{dist}: importing it warns of an undeclared dependency: {missing}"
    print(f"{dist}: {len(modules)} modules import with only declared dependencies, warning of none missing")

    cli = os.path.join(os.path.dirname(sys.executable), "trainkit")  # the console script of this environment
    listed = json.loads(subprocess.run([cli, "plugins", "--json"], check=True, capture_output=True, text=True).stdout)
    status = {p["name"]: p["status"] for p in listed}
    for plugin in plugins:
        assert status.get(plugin) == "loaded", f"plugin {plugin!r} did not load: {listed}"
    for runtime in (ep.name for ep in md.distribution(dist).entry_points if ep.group == "trainkit.runtimes"):
        assert status.get(runtime) == "loaded", f"runtime plugin {runtime!r} did not load: {listed}"  # no backend

    import trainkit

    for backend in plugins or (None,):
        scaling = trainkit.ScalingConfig(num_workers=2)
        run = trainkit.RunConfig(storage_path="/tmp/trainkit-packaging", verbose=0)
        trainer = (trainkit.Trainer(train_fn, backend=backend, scaling_config=scaling, run_config=run) if backend
                   else trainkit.DataParallelTrainer(train_fn, scaling_config=scaling, run_config=run))
        assert trainer.fit().metrics == {"world": 2}
        print(f"{dist}: a 2-worker run with backend {backend or '(none)'} works")


if __name__ == "__main__":
    if sys.argv[1] == "--built":
        check_built(sys.argv[2])
    else:
        main(*sys.argv[1:])
