"""The ``trainkit`` command. What it shows of a run (names, metrics, error messages, paths: read
back from storage, which anyone with access to it may have written) is shown escaped
(``terminal.terminal_safe``): it never drives the terminal nor is read as rich markup."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trainkit._internal.storage import strict_json
from trainkit._internal.terminal import terminal_safe


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
        table.add_row(*_cells(row["name"], row["distribution"] or "-", row["version"] or "-", framework, status,
                              ", ".join(row["backends"]) or "-"))
    _print(table)
    return 0


def _print(*renderables: Any) -> None:
    """Tables whose cells are ``_cells``, texts: rich markup in them is never interpreted."""
    from trainkit._internal.display import emit

    console = Console(emoji=False, highlight=False)
    emit(console if console.is_terminal else Console(width=10_000, emoji=False, highlight=False), *renderables)


def _cells(*values: Any) -> list[Text]:
    """Table cells of data: shown escaped, never read as markup."""
    return [Text(terminal_safe(value)) for value in values]


def _say(message: str, error: bool = False) -> None:
    """A line of the command's own, data in it shown escaped."""
    print(terminal_safe(message), file=sys.stderr if error else sys.stdout)


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _metrics(metrics: dict[str, Any], limit: int = 4) -> str:
    shown = [f"{terminal_safe(k)}={v:.4g}" if isinstance(v, float) else f"{terminal_safe(k)}={terminal_safe(v)}"
             for k, v in list(metrics.items())[:limit]]
    return ", ".join(shown) + (", ..." if len(metrics) > limit else "") or "-"


def _runs(args: argparse.Namespace) -> int:
    from trainkit._internal.storage.run_storage import default_storage_path
    from trainkit._internal.tools.runs import list_runs

    storage_path = args.storage_path or default_storage_path()
    try:
        runs = list_runs(storage_path)
    except FileNotFoundError as exc:
        if args.storage_path:  # a path the user named is not there
            _say(f"trainkit runs: {exc}", error=True)
            return 2
        runs = []
    if args.json:
        print(strict_json.dumps(runs, indent=1, default=str))
        return 0
    if not runs:
        _say(f"no trainkit runs under {storage_path}")
        return 0
    table = Table("name", "status", "attempts", "reports", "checkpoints", "best", "last metrics", "updated", box=None)
    for run in runs:
        best = f"{run['best_checkpoint']} ({run['best_by']})" if run["best_checkpoint"] else "-"
        table.add_row(*_cells(run["name"], run["status"], run["attempts"], run["reports"], run["checkpoints"],
                              best, _metrics(run["last_metrics"]), _when(run["updated"])))
    _print(table)
    return 0


def _show(args: argparse.Namespace) -> int:
    from trainkit._internal.tools.runs import describe_run

    try:
        run = describe_run(args.run, args.metric, args.mode)
    except (FileNotFoundError, ValueError) as exc:
        _say(f"trainkit show: {exc}", error=True)
        return 2
    if args.json:
        print(strict_json.dumps(run, indent=1, default=str))
        return 0
    lines = [f"run          {run['name']}  ({run['status']})", f"path         {run['path']}",
             f"backend      {run['backend'] or '-'} x {run['num_workers']} workers",
             f"attempts     {run['attempts']}   reports {run['reports']}",
             f"created      {_when(run['created'])}   updated {_when(run['updated'])}",
             f"last metrics {_metrics(run['last_metrics'], limit=8)}"]
    if len(set(run["world_sizes"])) > 1:  # an elastic run resized
        lines.append("world sizes  " + " -> ".join(map(str, run["world_sizes"])))
    if run["start_profile"]:
        lines.append("start        " + "  ".join(f"{phase} {s:.2f}s" for phase, s in run["start_profile"].items()))
    if run["error"]:
        lines.append(f"error        {run['error']}")
    for failure in run["failures"]:
        when = _when(failure["time"]) if isinstance(failure.get("time"), (int, float)) else "-"
        lines.append(f"failure      {when}  attempt {failure.get('attempt')}  {failure.get('message')}")
    best = run["best_checkpoint"]
    if best and best["ranked_by_run"]:
        how = f" (by {best['by']}, {best['mode']}: the run's checkpoint_score_attribute; --metric to choose)"
    elif best and best["mode"]:
        inferred = ", inferred from the name; --mode to choose" if best["mode_inferred"] else ""
        how = f" (by {best['by']}, {best['mode']}{inferred})"
    else:
        how = " (the latest; --metric to choose)" if best else ""
    lines.append(f"best         {best['name'] + how if best else '-'}")
    table = Table("checkpoint", "report", "attempt", "metrics", box=None)
    for c in run["checkpoints"]:
        marker = " *" if best and c["name"] == best["name"] else ""
        table.add_row(*_cells(c["name"] + marker, c["report_index"], c["attempt"], _metrics(c["metrics"], limit=8)))
    _print(Text("\n".join(terminal_safe(line) for line in lines)), table)
    return 0


def _plot(args: argparse.Namespace) -> int:
    from trainkit._internal.tools.runs import plot_metrics

    try:
        drawn = plot_metrics(args.run, args.metric, args.output, x=args.x)
    except (FileNotFoundError, ValueError, ImportError) as exc:
        _say(f"trainkit plot: {exc}", error=True)
        return 2
    _say(json.dumps(drawn) if args.json else
          f"wrote {drawn['output']}: {', '.join(drawn['metrics'])} over {drawn['reports']} reports (x: {drawn['x']}), "
          f"{drawn['checkpoints']} checkpoints ({len(drawn['deleted_checkpoints'])} deleted), "
          + (f"restarts at reports {', '.join(map(str, drawn['restarts_at']))}" if drawn["restarts_at"] else "no restarts"))
    return 0


def _launch(args: argparse.Namespace) -> int:
    from trainkit._internal.tools.launch_command import main as launch

    return launch(args)


def _runtime_missing(args: argparse.Namespace) -> int:
    """``trainkit up`` / ``down`` where no runtime plugin adds them: which install does."""
    from trainkit._internal.plugins import install_hint

    _say(f"trainkit {args.command}: the warm local cluster is the trainkit-warm package, not installed here: "
         f"{install_hint('trainkit-warm')}", error=True)
    return 2


RUNTIME_COMMANDS = {"up": "start a warm local Ray cluster that later runs attach to (needs trainkit-warm)",
                    "down": "stop the warm local cluster (needs trainkit-warm)"}


def _migrate(args: argparse.Namespace) -> int:
    from trainkit._internal.tools.migrate import migrate_paths

    try:
        migrations = migrate_paths(args.paths, write=args.write)
    except FileNotFoundError as exc:
        _say(f"trainkit migrate: {exc}", error=True)
        return 2
    unrewritten = [u for m in migrations for u in m.unrewritten]
    if args.json:
        print(json.dumps({"changed": [m.path for m in migrations if m.migrated != m.source],
                          "unrewritten": [asdict(u) for u in unrewritten]}, indent=1))
    else:
        for m in migrations:
            if args.write:
                if m.migrated != m.source:
                    _say(f"rewrote {m.path}")
            else:
                sys.stdout.write(m.diff())
        for u in unrewritten:
            _say(f"not rewritten: {u}", error=True)
    return 1 if unrewritten else 0


RUN_HELP = "the run's directory (local path or URI), or a run name under the default storage path"


def main(argv: list[str] | None = None) -> int:
    from importlib.metadata import version

    parser = argparse.ArgumentParser(prog="trainkit", description="Distributed training on Ray, any framework.")
    parser.add_argument("--version", action="version", version=f"trainkit {version('trainkit-core')}")
    commands = parser.add_subparsers(dest="command", required=True)
    plugins = commands.add_parser("plugins", help="installed plugins, versions and status")
    plugins.add_argument("--json", action="store_true", help="machine-readable output")
    plugins.set_defaults(func=_plugins)
    runs = commands.add_parser("runs", help="the runs under a storage path, with status and last metrics")
    runs.add_argument("storage_path", nargs="?", help="local path or URI, e.g. s3://bucket/runs (default: "
                      "$TRAINKIT_STORAGE_PATH, else ~/trainkit_results)")
    runs.add_argument("--json", action="store_true", help="machine-readable output")
    runs.set_defaults(func=_runs)
    show = commands.add_parser("show", help="one run: attempts, failures, checkpoints and the best one")
    show.add_argument("run", help=RUN_HELP)
    show.add_argument("--metric", help="pick the best checkpoint by this reported metric (default: the latest)")
    show.add_argument("--mode", choices=["max", "min"], help="with --metric: higher or lower is better (default: "
                      "min for loss-like names such as loss, error, mse, perplexity, time; else max)")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=_show)
    plot = commands.add_parser("plot", help="a PNG of metric curves, checkpoints and restarts marked")
    plot.add_argument("run", help=RUN_HELP)
    plot.add_argument("--metric", action="append", required=True, help="a reported metric; repeat for more")
    plot.add_argument("-o", "--output", default="metrics.png", help="the PNG to write (default: metrics.png)")
    plot.add_argument("--x", choices=["index", "step", "time"], default="index",
                      help="the x-axis: report index (default), the reported 'step', or wall-clock time")
    plot.add_argument("--json", action="store_true", help="machine-readable output")
    plot.set_defaults(func=_plot)
    from trainkit._internal.tools.launch_command import add_arguments as launch_arguments

    launch = commands.add_parser("launch", help="run a torchrun script on N workers, with restarts "
                                 "(torchrun's command line)",
                                 description="Run `python SCRIPT ARGS...` on every rank with torchrun's "
                                 "environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...). The command line "
                                 "is torchrun's: `trainkit launch` in place of `torchrun` does the same job.")
    launch_arguments(launch)
    launch.set_defaults(func=_launch)
    migrate = commands.add_parser("migrate", help="rewrite Ray Train scripts to trainkit (a diff, or --write)")
    migrate.add_argument("paths", nargs="+", metavar="PATH", help="a .py file, or a directory: every .py under it")
    migrate.add_argument("--write", action="store_true", help="rewrite the files in place instead of printing a diff")
    migrate.add_argument("--json", action="store_true", help="machine-readable output: changed files, what was not "
                         "rewritten")
    migrate.set_defaults(func=_migrate)
    from trainkit._internal.plugins import get_plugins

    get_plugins().hook.trainkit_cli_commands(subcommands=commands)  # runtime plugins' (trainkit-warm's up, down)
    for name, help_text in RUNTIME_COMMANDS.items():
        if name not in commands.choices:
            commands.add_parser(name, help=help_text, add_help=False).set_defaults(func=_runtime_missing)
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.func is not _runtime_missing:  # (its hint, whatever its options)
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
