"""The ``trainkit`` command."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from rich.console import Console
from rich.table import Table


def _plugins(args: argparse.Namespace) -> int:
    from trainkit._internal.plugins import get_plugins

    plugins = get_plugins()
    rows = [{**asdict(info), "backends": sorted(e.name for e in plugins.backends.entries.values()
                                                if e.plugin == info.name)}
            for info in plugins.infos.values()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        print("no trainkit plugins installed; e.g. pip install trainkit-torch")
        return 0
    table = Table("name", "distribution", "version", "framework", "status", "backends", box=None)
    for row in rows:
        framework = f"{row['framework']} {row['framework_version'] or '(missing)'}" if row["framework"] else "-"
        status = row["status"] + (f": {row['reason']}" if row["reason"] else "")
        table.add_row(row["name"], row["distribution"] or "-", row["version"] or "-", framework, status,
                      ", ".join(row["backends"]) or "-")
    console = Console()
    (console if console.is_terminal else Console(width=10_000)).print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trainkit", description="Distributed training on Ray, any framework.")
    commands = parser.add_subparsers(dest="command", required=True)
    plugins = commands.add_parser("plugins", help="installed plugins, versions and status")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(func=_plugins)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
