"""Run the full test matrix and record it in docs/compatibility.md; find framework releases newer than it.

    python tools/compatibility.py                   # runs `nox -t matrix`, then writes the table
    python tools/compatibility.py --report R.json [--report RERUN.json]
                                                    # the table from earlier nox --report files; a
                                                    # session in a later file replaces the same one
    python tools/compatibility.py --latest [--dry-run] [--all] [--package NAME] [--write]
                                                    # releases on the package index newer than each
                                                    # matrix's newest row: runs those pip may install
                                                    # here (`nox -t latest`), reports the ones pip's
                                                    # constraints or the package's own requirement cap
                                                    # (the newest of each major.minor; --all: every one);
                                                    # exit status 1 when one that ran failed; --write
                                                    # puts them in the page's "Newer releases" section

--latest follows each package's framework distributions: the pins of its test-matrix that the package
itself depends on (project.dependencies) or hands to its ``prepare`` module. For each, the newest row
holding the newest version is the base; every stable release newer than it (``pip index versions``,
for the base row's Python, else for the lowest newer Python core's matrix supports that the release
offers) becomes an extra row: the base row with that version substituted. A pin of the base row at the
same version (jaxlib beside jax, tf-keras beside tensorflow, lightning beside pytorch-lightning) moves
with it, to the same version or the companion's newest release of that major.minor below it. The rows
go to the noxfile in ``TRAINKIT_EXTRA_ROWS``; they never change the pyproject files.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import dataclasses
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).parent.parent
SESSION = re.compile(r"^(?P<plugin>[\w-]+)\((?P<args>.*)\)$")
PAGE = ROOT / "docs" / "compatibility.md"
NEWER = "\n## Newer releases"
NOTES = "\n## Notes"
PACKAGES = sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml"))
THIRDPARTY = ROOT / "tests" / "fixtures" / "thirdparty_plugin"
PYTHON = "3.11"  # a row's Python where it names none (as in noxfile.py)
PIP = [sys.executable, "-m", "pip"]


def notes(page: Path = PAGE) -> str:
    """The page's "## Newer releases" (where it has one) and "## Notes" sections, kept as written (the
    table above them is regenerated)."""
    text = page.read_text() if page.exists() else ""
    for heading in (NEWER, NOTES):
        if heading in text:
            return text[text.index(heading):]
    return ""


def rows(report: dict) -> list[tuple[str, str, str, str]]:
    out = []
    for session in report["sessions"]:
        match = SESSION.match(session["name"])
        if match:
            args = dict(part.split("=", 1) for part in match["args"].split(", "))
            python = args.pop("python")
            versions = ", ".join(f"{k} {v}" for k, v in args.items())
            plugin, versions = match["plugin"], versions
        else:
            plugin, versions, python = session["name"], "all plugins, pinned versions", "3.11"
        out.append((plugin, versions, python, {"success": "pass"}.get(session["result"], session["result"])))
    return out


def table(report: dict) -> str:
    lines = [
        "# Compatibility",
        "",
        "The full test matrix (`nox -t matrix`): every row runs the package's whole test suite in its own",
        "environment holding only that package, its framework at the version shown, and the test tools.",
        "Rows come from each package's `[tool.trainkit] test-matrix`; `python tools/compatibility.py`",
        "reruns them and rewrites this page (`--latest`: releases newer than the matrix, below).",
        "",
        f"Last run: {datetime.date.today()}, {platform.machine()}, {platform.system()}, 2 CPU cores, no GPU.",
        "",
        "| package | framework versions | Python | result |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {p} | {v} | {py} | {r} |" for p, v, py, r in rows(report)]
    return "\n".join(lines) + "\n" + notes()


# --- --latest: releases newer than the matrix ---------------------------------------------------


def parse_index_versions(output: str) -> list[Version]:
    """The stable releases in ``pip index versions`` output, newest first: no pre- or dev releases, and
    local builds (``2.13.0+cpu``) counted as their public version."""
    match = re.search(r"^Available versions:(.*)$", output, re.MULTILINE)
    found = set()
    for text in (match[1].split(",") if match else []):
        try:
            version = Version(text.strip())
        except InvalidVersion:
            continue
        if not version.is_prerelease:
            found.add(Version(version.public))
    return sorted(found, reverse=True)


def index_versions(distribution: str, python: str) -> list[Version]:
    """The stable releases of ``distribution`` pip's index (and find-links) offer for that Python; []
    where it offers none."""
    done = subprocess.run([*PIP, "index", "versions", distribution, "--python-version", python],
                          capture_output=True, text=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return parse_index_versions(done.stdout) if done.returncode == 0 else []


def constraint_files(pip_config_list: str | None = None) -> list[str]:
    """The constraints files pip's install reads: ``PIP_CONSTRAINT``, else ``install.constraint``, else
    ``global.constraint`` of ``pip config list`` (which shows the environment's as ``:env:.constraint``)."""
    if pip_config_list is None:
        pip_config_list = subprocess.run([*PIP, "config", "list"], capture_output=True, text=True).stdout
    settings = {}
    for line in pip_config_list.splitlines():
        name, _, value = line.partition("=")
        if name in (":env:.constraint", "install.constraint", "global.constraint") and value:
            settings[name] = ast.literal_eval(value)
    for name in (":env:.constraint", "install.constraint", "global.constraint"):
        if settings.get(name, "").strip():
            return settings[name].split()
    return []


@dataclasses.dataclass(frozen=True)
class Constraint:
    requirement: Requirement
    source: str  # the file it comes from


def read_constraints(paths: list[str]) -> dict[str, list[Constraint]]:
    """Each constraints file's requirements by canonical name (``-c``/``-r`` lines followed)."""
    found: dict[str, list[Constraint]] = {}

    def read(path: str, seen: set[str]) -> None:
        path = path.removeprefix("file://")
        if path in seen or not os.path.isfile(path):
            return
        seen.add(path)
        for raw in Path(path).read_text().splitlines():
            line = re.sub(r"(^|\s)#.*", "", raw).strip()
            if not line:
                continue
            if option := re.match(r"^(-c|-r|--constraint|--requirement)[\s=]+(\S+)", line):
                read(os.path.join(os.path.dirname(path), option[2]), seen)
                continue
            if line.startswith("-"):
                continue
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            found.setdefault(canonicalize_name(requirement.name), []).append(Constraint(requirement, path))

    seen: set[str] = set()
    for path in paths:
        read(path, seen)
    return found


def _allows(requirement: Requirement, version: Version, python: str) -> bool:
    if requirement.marker and not requirement.marker.evaluate({"python_version": python,
                                                               "python_full_version": f"{python}.0"}):
        return True
    return requirement.specifier.contains(version, prereleases=True)


def cap(distribution: str, version: str, python: str, constraints: dict[str, list[Constraint]]) -> str | None:
    """Why pip may not install ``distribution==version`` here (a constraint that excludes it), or None."""
    for constraint in constraints.get(canonicalize_name(distribution), []):
        if not _allows(constraint.requirement, Version(version), python):
            return f"capped here (constraint {constraint.requirement} in {constraint.source})"
    return None


def _pyproject(package: Path) -> dict:
    return tomllib.loads((package / "pyproject.toml").read_text())


def _package_name(package: Path) -> str:
    return "thirdparty" if package == THIRDPARTY else package.name


def _rows(package: Path) -> list[dict]:
    """The package's test-matrix rows, the CI row marked as noxfile.py marks it."""
    rows = _pyproject(package).get("tool", {}).get("trainkit", {}).get("test-matrix", [])
    if rows and not any(row.get("ci") for row in rows):
        rows[-1]["ci"] = True
    return rows


def own_requirements(package: Path) -> dict[str, Requirement]:
    """The package's ``project.dependencies`` by canonical name."""
    requirements = {}
    for text in _pyproject(package)["project"].get("dependencies", []):
        requirement = Requirement(text)
        requirements[canonicalize_name(requirement.name)] = requirement
    return requirements


def followed(package: Path) -> list[str]:
    """The package's framework distributions: its matrix's pins that it depends on itself, or that its
    ``prepare`` module installs (Horovod)."""
    own = set(own_requirements(package))
    prepared = _pyproject(package).get("tool", {}).get("trainkit", {}).get("prepare", {}).get("pins", [])
    names: list[str] = []
    for row in _rows(package):
        for name in row:
            ours = canonicalize_name(name) in own or name in prepared
            if name not in ("python", "ci") and name not in names and ours:
                names.append(name)
    return names


def session_name(package: str, row: dict) -> str:
    """The nox session noxfile.py makes of a row (its _session_name)."""
    pins = [f"{k}={v}" for k, v in row.items() if k not in ("python", "ci")]
    return f"{package}({', '.join([*pins, 'python=' + row.get('python', PYTHON)])})"


def supported_pythons() -> list[str]:
    """The Pythons of core's matrix, oldest first: the ones trainkit supports."""
    return sorted({row.get("python", PYTHON) for row in _rows(ROOT / "packages" / "core")}, key=Version)


@dataclasses.dataclass
class Newer:
    package: str  # noxfile's name for it: packages/<name>, or thirdparty
    distribution: str
    version: str  # the newer release
    newest: str  # the matrix's newest version of it
    row: dict  # the extra row: the base row with the newer version (and its companions) substituted
    status: str  # "run" where pip may install it here, else why not
    result: str = ""  # pass / fail / skipped / not run (after --latest runs the sessions)

    @property
    def session(self) -> str:
        return session_name(self.package, self.row)

    @property
    def runnable(self) -> bool:
        return self.status == "run"


def _companion_version(available: list[Version], version: Version) -> Version | None:
    """A companion's release for ``version``: the same one, else its newest of that major.minor below it."""
    if version in available:
        return version
    below = [v for v in available if v <= version and v.release[:2] == version.release[:2]]
    return max(below, default=None)


def find_newer(packages: list[Path] | None = None,
               versions: Callable[[str, str], list[Version]] = index_versions,
               constraints: dict[str, list[Constraint]] | None = None,
               pythons: list[str] | None = None, every: bool = False) -> tuple[list[Newer], list[str]]:
    """Every stable release newer than the matrices' newest rows (``versions(distribution, python)`` says
    what the index offers), and "name version (package)" for each followed distribution that has none.
    Of the releases pip may install, only the newest of each major.minor series runs, unless ``every``."""
    packages = [*PACKAGES, THIRDPARTY] if packages is None else packages
    constraints = read_constraints(constraint_files()) if constraints is None else constraints
    pythons = supported_pythons() if pythons is None else pythons
    wanted: list[tuple[Path, str, dict, list[str]]] = []
    for package in packages:
        rows = _rows(package)
        for distribution in followed(package):
            holding = [row for row in rows if distribution in row]
            newest = max(Version(str(row[distribution])) for row in holding)
            at_newest = [row for row in holding if Version(str(row[distribution])) == newest]
            base = next((row for row in at_newest if row.get("ci")), at_newest[-1])
            python = base.get("python", PYTHON)
            wanted.append((package, distribution, base,
                           [python, *(p for p in pythons if Version(p) > Version(python))]))
    queries = {(d, p) for _, distribution, base, ps in wanted for p in ps
               for d in [distribution, *(k for k, v in base.items()
                                         if k not in ("python", "ci", distribution) and v == base[distribution])]}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # each look-up waits seconds on the index
        answers = dict(zip(queries, pool.map(lambda q: versions(*q), queries)))
    found: list[Newer] = []
    up_to_date: list[str] = []
    for package, distribution, base, ps in wanted:
        newest = Version(str(base[distribution]))
        first_python: dict[Version, str] = {}
        for python in ps:  # the base row's Python first, then newer ones, for releases that need them
            for version in answers[(distribution, python)]:
                if version > newest:
                    first_python.setdefault(version, python)
        if not first_python:
            up_to_date.append(f"{distribution} {base[distribution]} ({_package_name(package)})")
        requirements = own_requirements(package)
        companions = [k for k, v in base.items() if k not in ("python", "ci", distribution) and v == base[distribution]]
        for version, python in sorted(first_python.items()):
            row = {k: str(v) for k, v in base.items() if k != "ci"}
            row["python"] = python
            row[distribution] = str(version)
            status = "run"
            for companion in companions:
                match = _companion_version(answers[(companion, python)], version)
                if match is None:
                    status = f"no {companion} release for {version} on the index"
                else:
                    row[companion] = str(match)
            if status == "run":
                for name in [distribution, *companions]:
                    own = requirements.get(canonicalize_name(name))
                    if own and not _allows(own, Version(row[name]), python):
                        status = f"capped by the package ({own})"
                        break
                    if why := cap(name, row[name], python, constraints):
                        status = why
                        break
            series = max(v for v in first_python if v.release[:2] == version.release[:2])
            if status == "run" and version != series and not every:
                status = f"not run: {series} is newer in {version.major}.{version.minor} (--all runs it)"
            found.append(Newer(_package_name(package), distribution, str(version), str(base[distribution]),
                               row, status))
    return found, up_to_date


def run_latest(newer: list[Newer], report: Path) -> None:
    """Runs the runnable rows (``nox -t latest``) and sets each one's result from nox's report."""
    extra: dict[str, list[dict]] = {}
    for item in newer:
        if item.runnable:
            extra.setdefault(item.package, []).append(item.row)
    if not extra:
        return
    report.parent.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)
    subprocess.run([sys.executable, "-m", "nox", "-t", "latest", "--report", str(report)], cwd=ROOT,
                   env={**os.environ, "TRAINKIT_EXTRA_ROWS": json.dumps(extra)})
    set_results(newer, json.loads(report.read_text()) if report.exists() else {"sessions": []})


def set_results(newer: list[Newer], report: dict) -> None:
    results = {s["name"]: {"success": "pass", "failed": "fail"}.get(s["result"], s["result"])
               for s in report["sessions"]}
    for item in newer:
        if item.runnable:
            item.result = results.get(item.session, "not run")


def failed(newer: list[Newer]) -> list[Newer]:
    """The runnable rows that did not pass (failed, skipped for a missing Python, or not run at all)."""
    return [item for item in newer if item.runnable and item.result and item.result != "pass"]


def latest_table(newer: list[Newer]) -> list[str]:
    lines = ["| package | newer release | matrix's newest | row (nox session) | result |",
             "| --- | --- | --- | --- | --- |"]
    for item in newer:
        result = (item.result or "not run (dry run)") if item.runnable else item.status
        lines.append(f"| {item.package} | {item.distribution} {item.version} | {item.newest} | "
                     f"`{item.session}` | {result} |")
    return lines


def latest_section(newer: list[Newer], up_to_date: list[str], dry_run: bool) -> str:
    how = ("A dry run: the releases were looked up and no session ran; a row whose result is 'not run (dry run)' "
           "is one pip may install here." if dry_run else
           "Each runnable row ran the package's whole test suite, as a matrix row does.")
    lines = [
        NEWER.strip(),
        "",
        "`python tools/compatibility.py --latest` looks up, for each package's framework distributions, the",
        "stable releases on the package index newer than the matrix's newest row, and runs each as that row",
        "with the newer version substituted (`nox -t latest`) where pip may install it here; pip's",
        "constraints here, or the package's own requirement, cap the others.",
        "",
        f"Last looked up: {datetime.date.today()}, {platform.machine()}, {platform.system()}. {how}",
        "",
        *(latest_table(newer) if newer else ["No newer release."]),
        "",
    ]
    if up_to_date:
        lines += ["No newer release: " + ", ".join(up_to_date) + ".", ""]
    return "\n".join(lines)


def write_latest(section: str, page: Path = PAGE) -> None:
    """Puts ``section`` in the page in place of its "## Newer releases" section, else before "## Notes";
    the rest of the page stays as it is."""
    text = page.read_text()
    notes_at = text.index(NOTES) if NOTES in text else len(text)
    start = text.index(NEWER) if NEWER in text else notes_at
    page.write_text(text[:start].rstrip("\n") + "\n\n" + section + text[notes_at:])


def latest(dry_run: bool, write: bool, every: bool, only: list[str] | None = None) -> int:
    packages = [p for p in [*PACKAGES, THIRDPARTY] if not only or _package_name(p) in only]
    newer, up_to_date = find_newer(packages, every=every)
    if not dry_run:
        run_latest(newer, ROOT / ".nox" / "latest-report.json")
    section = latest_section(newer, up_to_date, dry_run)
    print(section)
    if write:
        write_latest(section)
    if bad := failed(newer):
        print("newer releases that did not pass: "
              + ", ".join(f"{item.distribution} {item.version} ({item.result})" for item in bad))
        return 1
    return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", action="append", help="nox --report JSON files to use instead of running")
    parser.add_argument("--latest", action="store_true",
                        help="look up releases newer than each matrix's newest row and run them (nox -t latest)")
    parser.add_argument("--dry-run", action="store_true", help="with --latest: list what is newer, run nothing")
    parser.add_argument("--package", action="append",
                        help="with --latest: only this package (core, torch, ..., thirdparty); repeatable")
    parser.add_argument("--all", action="store_true",
                        help="with --latest: run every newer release, not only the newest of each major.minor")
    parser.add_argument("--write", action="store_true",
                        help="with --latest: put the results in docs/compatibility.md's \"Newer releases\" section")
    args = parser.parse_args()
    if args.latest and args.write and args.package:
        parser.error("--write records every package: leave out --package")
    if args.latest:
        sys.exit(latest(args.dry_run, args.write, args.all, args.package))
    if args.dry_run or args.write or args.all or args.package:
        parser.error("--dry-run, --all and --write go with --latest (the full matrix always writes the page)")
    paths = [Path(p) for p in args.report or [ROOT / ".nox" / "matrix-report.json"]]
    if not args.report:
        subprocess.run([sys.executable, "-m", "nox", "-t", "matrix", "--report", str(paths[0])], cwd=ROOT)
    sessions: dict[str, dict] = {}
    for path in paths:
        sessions.update((s["name"], s) for s in json.loads(path.read_text())["sessions"])
    ordered = sorted(sessions.values(), key=lambda s: s["name"] == "together")  # the all-in-one row last
    PAGE.write_text(table({"sessions": ordered}))
    print(PAGE.read_text())


if __name__ == "__main__":
    main()
