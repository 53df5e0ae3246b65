"""Run the full test matrix and record it in docs/compatibility.md.

    python tools/compatibility.py                   # runs `nox -t matrix`, then writes the table
    python tools/compatibility.py --report R.json [--report RERUN.json]
                                                    # the table from earlier nox --report files; a
                                                    # session in a later file replaces the same one
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
SESSION = re.compile(r"^(?P<plugin>[\w-]+)\((?P<args>.*)\)$")
PAGE = ROOT / "docs" / "compatibility.md"


def notes() -> str:
    """The page's own "## Notes" section, kept as written (the table above it is regenerated)."""
    text = PAGE.read_text() if PAGE.exists() else ""
    return text[text.index("\n## Notes"):] if "\n## Notes" in text else ""


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
        "reruns them and rewrites this page.",
        "",
        f"Last run: {datetime.date.today()}, {platform.machine()}, {platform.system()}, 2 CPU cores, no GPU.",
        "",
        "| package | framework versions | Python | result |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {p} | {v} | {py} | {r} |" for p, v, py, r in rows(report)]
    return "\n".join(lines) + "\n" + notes()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", action="append", help="nox --report JSON files to use instead of running")
    args = parser.parse_args()
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
