"""Run the full test matrix and record it in docs/compatibility.md.

    python tools/compatibility.py                   # runs `nox -t matrix`, then writes the table
    python tools/compatibility.py --report R.json   # writes the table from an earlier nox --report
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
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", help="a nox --report JSON file to use instead of running the matrix")
    args = parser.parse_args()
    report_path = Path(args.report or ROOT / ".nox" / "matrix-report.json")
    if not args.report:
        subprocess.run([sys.executable, "-m", "nox", "-t", "matrix", "--report", str(report_path)], cwd=ROOT)
    (ROOT / "docs" / "compatibility.md").write_text(table(json.loads(report_path.read_text())))
    print((ROOT / "docs" / "compatibility.md").read_text())


if __name__ == "__main__":
    main()
