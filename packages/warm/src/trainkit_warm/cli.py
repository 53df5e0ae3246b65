"""``trainkit up`` and ``trainkit down``, added to core's command by ``_plugin.py``."""

from __future__ import annotations

import argparse
import json
import sys

from trainkit._internal.terminal import terminal_safe


def add_commands(subcommands: argparse._SubParsersAction) -> None:
    up = subcommands.add_parser("up", help="start a warm local Ray cluster that later runs attach to (opt-in)",
                                description="Start this user's warm local cluster (Ray on loopback, its files private) "
                                "that fit(), `trainkit launch` and scripts started afterwards attach to instead of "
                                "starting Ray each. Every run still gets fresh worker processes. `trainkit down` stops it.")
    up.add_argument("--idle-timeout", help="stop it when no driver used it for this long: 90s, 30m, "
                    "2h, or 0 for never (default: 30m)")
    up.add_argument("--num-cpus", type=int, help="CPUs the cluster offers (default: the machine's)")
    up.add_argument("--prewarm", action="append", metavar="MODULE", help="a module its idle workers import ahead "
                    "of a run; repeat for more, `none` for nothing (default: the torch backend's modules where "
                    "trainkit-torch is installed)")
    up.add_argument("--spares", type=int, metavar="N", help="worker processes it keeps started, with the prewarm "
                    "modules imported, for the next run to take (default: one per CPU, at most 4; 0 for none)")
    up.add_argument("--json", action="store_true", help="machine-readable output: the cluster's record")
    up.set_defaults(func=_up)
    down = subcommands.add_parser("down", help="stop the warm local cluster; nothing of it is left running")
    down.add_argument("--json", action="store_true", help="machine-readable output")
    down.set_defaults(func=_down)


def _say(message: str, error: bool = False) -> None:
    """A line of the command's own, data in it shown escaped."""
    print(terminal_safe(message), file=sys.stderr if error else sys.stdout)


def _default_prewarm() -> list[str]:
    """The modules to prewarm in the warm cluster's workers: the torch backend's (what its workers
    import first) where trainkit-torch is installed and loads, else none."""
    from trainkit._internal.plugins import torch_backend

    return list(framework.prewarm_modules) if (framework := torch_backend()) is not None else []


def _up(args: argparse.Namespace) -> int:
    from trainkit_warm import keeper, record

    try:
        idle_s = record.parse_duration(args.idle_timeout) if args.idle_timeout is not None \
            else record.DEFAULT_IDLE_TIMEOUT_S
    except ValueError:
        _say(f"trainkit up: --idle-timeout {args.idle_timeout!r}: give e.g. 90s, 30m, 2h, or 0 for never", error=True)
        return 2
    prewarm = [m for m in (args.prewarm if args.prewarm is not None else _default_prewarm()) if m != "none"]
    try:
        if args.spares is not None and args.spares < 0:
            raise RuntimeError(f"--spares {args.spares}: give 0 (none) or more")
        found, started = keeper.up(idle_s, args.num_cpus, prewarm, args.spares)
    except RuntimeError as exc:
        _say(f"trainkit up: {exc}", error=True)
        return 1
    if args.json:
        print(json.dumps({**found, "started_now": started}, indent=1))
        return 0
    idle = f"stops after {found['idle_timeout_s']:g} s unused" if found["idle_timeout_s"] else "no idle timeout"
    _say(f"warm cluster {'started' if started else 'already up'} at {found['address']} (keeper pid "
         f"{found['keeper_pid']}, {found.get('num_cpus') or '?'} CPUs, {idle}, prewarm: "
         f"{', '.join(found['prewarm']) or 'nothing'}, {found.get('spares', 0)} spare workers); "
         "`trainkit down` stops it")
    if not started and (unlike := _settings_unlike(args, found, idle_s, prewarm)):
        _say(f"trainkit up: the cluster already up has {'; '.join(unlike)}: not what was asked; "
             "`trainkit down`, then `trainkit up` again, to change them", error=True)
    return 0


def _settings_unlike(args: argparse.Namespace, found: dict, idle_s: float, prewarm: list[str]) -> list[str]:
    """The settings given on ``up``'s command line that the cluster already up has otherwise."""
    asked = [("--idle-timeout", args.idle_timeout, idle_s, float(found.get("idle_timeout_s") or 0)),
             ("--prewarm", args.prewarm, prewarm, found.get("prewarm")),
             ("--spares", args.spares, args.spares, found.get("spares")),
             ("--num-cpus", args.num_cpus, float(args.num_cpus or 0), float(found.get("num_cpus") or 0))]
    return [f"{flag} {has!r}" for flag, given, want, has in asked if given is not None and want != has]


def _down(args: argparse.Namespace) -> int:
    from trainkit_warm import keeper

    found = keeper.down()
    if args.json:
        print(json.dumps({"stopped": found}, indent=1))
    elif found is None:
        _say("no warm cluster is up")
    else:
        _say(f"warm cluster {found['address']} stopped (keeper pid {found['keeper_pid']})")
    return 0
