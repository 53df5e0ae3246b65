"""``trainkit launch``'s command line: torchrun's, flag for flag and in both spellings
(``--nproc-per-node``/``--nproc_per_node``), with ``PET_*`` environment variables as defaults as
torchrun reads them, plus trainkit's own flags. ``plan`` checks the arguments and says what to run;
``main`` runs the script on the ranks through a ``DataParallelTrainer`` with ``launch.run_script`` as
its training function."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import trainkit
from trainkit._internal import display, interface
from trainkit._internal.cluster.gpus import gpu_count
from trainkit._internal.plugins import torch_backend
from trainkit._internal.terminal import terminal_safe
from trainkit._internal.tools.launch import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    DEFAULT_SIGNALS,
    LaunchConfig,
    forwarder,
    run_script,
)
from trainkit.errors import ScriptExitError

# torchrun flags that a Ray cluster makes moot: trainkit places every rank from this one command,
# picks MASTER_ADDR/MASTER_PORT itself and starts each rank as a fresh process of its own worker
_MOOT = ("standalone", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "rdzv_conf", "master_addr", "master_port",
         "local_addr", "start_method", "monitor_interval", "run_path")
_UNSUPPORTED = ("event_log_handler", "logs_specs", "numa_binding", "duplicate_stdout_filters",
                "duplicate_stderr_filters")
LOG_DIR_DEFAULT = os.path.join(tempfile.gettempdir(), "trainkit-launch-logs")  # -r/-t without --log-dir


class UsageError(SystemExit):
    """A bad command line, which ends the command (exit status 2, by `main`): the message names the
    flag as it was spelled. Never raised to a user's code: `trainkit launch` only."""


class _Store(argparse.Action):
    """Stores the value and remembers the flag's spelling, so messages name it as the user wrote it."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.spelled = {**(getattr(namespace, "spelled", None) or {}), self.dest: option_string}


class _StoreTrue(_Store):
    def __init__(self, option_strings: list[str], dest: str, default: Any = False, **kwargs: Any):
        super().__init__(option_strings, dest, nargs=0, default=default, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        super().__call__(parser, namespace, True, option_string)


def add_arguments(parser: Any) -> None:
    from_env: dict[str, str] = {}

    def flag(group: Any, name: str, *aliases: str, short: str | None = None, boolean: bool = False,
             env: str | None = "", default: Any = None, **kwargs: Any) -> None:
        """``--a-b`` and ``--a_b`` (as torchrun spells every flag); the default from ``PET_A_B``
        (``env``: another name; None: none) when set, as torchrun's ``env``/``check_env`` actions read it."""
        dest = kwargs.pop("dest", name.replace("-", "_"))
        names = [short] * bool(short) + [f"--{name}"] + [f"--{name.replace('-', '_')}"] * ("-" in name)
        for alias in aliases:
            names += [f"--{alias}"] + [f"--{alias.replace('-', '_')}"] * ("-" in alias)
        env = f"PET_{dest.upper()}" if env == "" else env
        if env is not None and env in os.environ:
            value = os.environ[env]
            default = value.strip().lower() not in ("", "0", "false", "no") if boolean else value
            from_env[dest] = env
        group.add_argument(*names, dest=dest, action=_StoreTrue if boolean else _Store, default=default, **kwargs)

    size = parser.add_argument_group("ranks")
    flag(size, "nproc-per-node", "nproc", default="1", metavar="N|gpu|cpu|auto",
         help="ranks per node: a number, gpu (one per visible GPU), cpu (os.cpu_count()), auto (gpu when a GPU is "
         "visible, else cpu) (default: 1)")
    flag(size, "nnodes", default="1", metavar="N|MIN:MAX",
         help="nodes' worth of ranks: N x --nproc-per-node ranks on the Ray cluster; MIN:MAX is elastic (default: 1)")
    flag(size, "node-rank", type=int, metavar="R",
         help="this node's rank: with --nnodes > 1, only node rank 0 launches (all ranks); the others exit 0 "
         "(default: $SLURM_NODEID under srun with --nnodes > 1, else 0)")
    flag(size, "cpus-per-worker", type=float, default=1.0, metavar="C", help="CPUs each rank reserves (default: 1)")
    flag(size, "gpus-per-worker", type=float, default=0.0, metavar="G",
         help="GPUs each rank reserves from Ray, and then sees only its own (default: 0: every rank sees all "
         "of its node's GPUs, as under torchrun)")
    run = parser.add_argument_group("the run")
    flag(run, "max-failures", "max-restarts", type=int, default=0, env="PET_MAX_RESTARTS", metavar="K",
         help="restart all ranks this many times after a rank fails (-1: always; default: 0)")
    flag(run, "name", help="the run's name (default: <script>_<date>)")
    flag(run, "storage-path", metavar="P", help="where the run directory goes (default: $TRAINKIT_STORAGE_PATH, "
         "else ~/trainkit_results)")
    flag(run, "shutdown-timeout", type=float, metavar="SECONDS",
         help="after a signal to the launcher, or a rank's failure, the ranks still running are "
         "SIGKILLed this long after their SIGTERM (default: $TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30)")
    flag(run, "signals-to-handle", default=DEFAULT_SIGNALS, metavar="SIGNALS",
         help="signals the launcher sends on to every rank as they are (default: %(default)s)")
    how = parser.add_argument_group("how each rank runs the script")
    flag(how, "module", short="-m", boolean=True, help="run the script argument as a module: python -m MODULE ARGS")
    flag(how, "no-python", boolean=True, help="run the script argument as an executable, not through python")
    flag(how, "role", default="default", help="the ranks' ROLE_NAME (default: default)")
    flag(how, "virtual-local-rank", boolean=True, help="LOCAL_RANK is 0 on every rank (each sees only its own "
         "GPU at index 0 with --gpus-per-worker 1)")
    logs = parser.add_argument_group("output")
    flag(logs, "log-dir", metavar="DIR", help="each rank's stdout and stderr also go to "
         "DIR/<name>/attempt_<N>/<rank>/{stdout,stderr}.log, on the rank's node")
    flag(logs, "redirects", short="-r", metavar="STD", help="0-3 or LOCAL_RANK:STD,... (1 stdout, 2 stderr, "
         "3 both): that output goes only to the --log-dir file, not to the console nor the run's logs")
    flag(logs, "tee", short="-t", metavar="STD", help="as --redirects, and shown and kept as well")
    flag(logs, "local-ranks-filter", metavar="RANKS", help="show only these ranks' output on the console "
         "(e.g. 0 or 0,1); every rank's is still kept in the run directory")
    moot = parser.add_argument_group("accepted as torchrun accepts them; moot on a Ray cluster (a note says so)")
    flag(moot, "standalone", boolean=True, help="trainkit always sets up the rendezvous itself")
    for name in ("rdzv-backend", "rdzv-endpoint", "rdzv-id", "rdzv-conf", "master-addr", "local-addr",
                 "event-log-handler", "duplicate-stdout-filters", "duplicate-stderr-filters"):
        flag(moot, name, help=argparse.SUPPRESS)
    flag(moot, "master-port", type=int, help=argparse.SUPPRESS)
    flag(moot, "start-method", choices=["spawn", "fork", "forkserver"], help=argparse.SUPPRESS)
    flag(moot, "monitor-interval", type=float, help=argparse.SUPPRESS)
    flag(moot, "run-path", boolean=True, help=argparse.SUPPRESS)
    flag(moot, "logs-specs", env=None, help=argparse.SUPPRESS)  # torchrun reads no PET_ for these two
    flag(moot, "numa-binding", env=None, help=argparse.SUPPRESS)
    parser.add_argument("script", help="the Python script, run as `python SCRIPT ARGS...` on every rank (-m: a "
                        "module; --no-python: an executable)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER,
                        help="the script's arguments: everything after the script is the script's")
    parser.set_defaults(spelled=None, from_env=from_env)


@dataclass
class Plan:
    """What ``trainkit launch`` runs: ``skip`` (a message) when this machine has nothing to run."""

    num_workers: int | tuple[int, int] = 1
    resources: dict[str, float] | None = None
    config: dict[str, Any] | None = None  # run_script's
    name: str = ""
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S
    signals: tuple[str, ...] = ()
    console_ranks: frozenset[int] | None = None
    size_flag: str = "--nproc"  # how messages name the number of ranks
    note: str = ""  # one line, or nothing
    skip: str = ""


def _spelled(args: Any, dest: str, default: str) -> str:
    return (args.spelled or {}).get(dest) or args.from_env.get(dest) or default


def _given(args: Any, dest: str) -> bool:
    return dest in (args.spelled or {}) or dest in args.from_env


def plan(args: Any) -> Plan:
    """Check the command line and say what to run; raises UsageError."""
    per_node = _ranks_per_node(args.nproc_per_node, _spelled(args, "nproc_per_node", "--nproc-per-node"))
    min_nodes, max_nodes = _nnodes(args.nnodes)
    node_rank, rank_from = args.node_rank, _spelled(args, "node_rank", "--node-rank")
    if node_rank is None and max_nodes > 1 and os.environ.get("SLURM_NODEID", "").isdigit():
        node_rank, rank_from = int(os.environ["SLURM_NODEID"]), "SLURM_NODEID"
    if node_rank is not None and not 0 <= node_rank < max_nodes:
        raise UsageError(f"{rank_from} {node_rank}: expected 0 to {max_nodes - 1} (--nnodes {args.nnodes})")
    total = f"{per_node * min_nodes}" if min_nodes == max_nodes else f"{per_node * min_nodes} to {per_node * max_nodes}"
    if node_rank:
        return Plan(skip=f"{rank_from} {node_rank}: nothing to run here. trainkit launch runs once, on one machine, "
                    f"for the whole cluster: node rank 0's launch places all {total} ranks on the Ray cluster")
    if args.max_failures < -1:
        raise UsageError(f"{_spelled(args, 'max_failures', '--max-failures')} {args.max_failures}: "
                         "expected -1 or more")
    shutdown = args.shutdown_timeout
    if shutdown is None:
        shutdown = os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(DEFAULT_SHUTDOWN_TIMEOUT_S))
    shutdown, timeout_problem = _seconds(shutdown)
    if timeout_problem:
        raise UsageError(f"--shutdown-timeout {timeout_problem}")
    signals = tuple(name.strip() for name in args.signals_to_handle.split(",") if name.strip())
    if unknown := [name for name in signals if not _catchable(name)]:
        raise UsageError(f"--signals-to-handle {','.join(unknown)}: expected signal names a process can catch, "
                         f"e.g. {DEFAULT_SIGNALS},SIGUSR1")
    mode, script, label = _script(args)
    gpus = args.gpus_per_worker
    resources = {"CPU": args.cpus_per_worker, **({"GPU": gpus} if gpus else {})}
    name = args.name or f"{label.rsplit('.', 1)[0] if mode == 'script' else label}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    redirects = _std(args.redirects, _spelled(args, "redirects", "--redirects"))
    tee = _std(args.tee, _spelled(args, "tee", "--tee"))
    logs = None
    if args.log_dir or redirects != (0, {}) or tee != (0, {}):
        if args.log_dir and redirects == tee == (0, {}):
            tee = (3, {})  # --log-dir alone: every rank's output also goes there
        logs = {"root": os.path.abspath(os.path.expanduser(args.log_dir or LOG_DIR_DEFAULT)),
                "redirects": redirects, "tee": tee}
    console_ranks = None
    if args.local_ranks_filter is not None:
        try:
            console_ranks = frozenset(int(r) for r in args.local_ranks_filter.split(","))
        except ValueError:
            raise UsageError(f"{_spelled(args, 'local_ranks_filter', '--local-ranks-filter')} "
                             f"{args.local_ranks_filter!r}: expected ranks separated by commas, e.g. 0,1") from None
    config = {"script": script, "mode": mode, "label": label, "args": list(args.script_args), "cwd": os.getcwd(),
              "max_restarts": args.max_failures, "signals": list(signals), "role": args.role,
              "virtual_local_rank": args.virtual_local_rank, "logs": logs}
    num_workers = per_node * max_nodes if min_nodes == max_nodes else (per_node * min_nodes, per_node * max_nodes)
    size_flag = "--nproc" if _spelled(args, "nproc_per_node", "--nproc") == "--nproc" \
        else _spelled(args, "nproc_per_node", "--nproc-per-node")
    if _given(args, "nnodes"):
        size_flag = f"--nnodes {args.nnodes} x {size_flag}"
    return Plan(num_workers, resources, config, name, shutdown, signals, console_ranks, size_flag,
                _note(args, total, max_nodes, logs, name), "")


def _ranks_per_node(value: str, flag: str) -> int:
    """Ranks per node, as torchrun reads --nproc-per-node."""
    value = str(value).strip()
    if value.lstrip("-").isdigit():
        if int(value) < 1:
            raise UsageError(f"{flag} {value}: expected 1 or more")
        return int(value)
    if value in ("gpu", "auto"):
        if gpus := _visible_gpus():
            return gpus
        if value == "gpu":
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            raise UsageError(f"{flag} gpu: no GPU is visible here" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible
                                                                      is not None else ""))
    if value in ("cpu", "auto"):
        return os.cpu_count() or 1
    raise UsageError(f"{flag} {value}: expected a number, gpu, cpu or auto")


def _visible_gpus() -> int:
    """CUDA devices this process sees, as torchrun counts them (torch.cuda.device_count(); without
    torch: nvidia-smi's, narrowed by CUDA_VISIBLE_DEVICES)."""
    try:
        import torch
    except ImportError:
        torch = None
    return torch.cuda.device_count() if torch is not None else gpu_count()


def _nnodes(value: str) -> tuple[int, int]:
    parts = str(value).split(":")
    try:
        low, high = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (0, 0)
    except ValueError:
        low = high = 0
    if not 1 <= low <= high:
        raise UsageError(f"--nnodes {value}: expected N or MIN:MAX with 1 <= MIN <= MAX")
    return low, high


def _script(args: Any) -> tuple[str, str, str]:
    """(how each rank runs it: script, module or exec; the script, module or executable; its label)."""
    if args.run_path:  # torchrun's --run-path wins over --no-python; the script runs as `python SCRIPT`
        args.no_python = False
    if args.module and args.no_python:
        raise UsageError("--no-python and -m/--module: not both (as torchrun)")
    if args.module:
        return "module", args.script, args.script
    if args.no_python:
        if os.sep not in args.script:  # a command on PATH, as torchrun runs it
            if not shutil.which(args.script):
                raise UsageError(f"{args.script!r} (--no-python) is not a command on PATH")
            return "exec", args.script, args.script
        path = os.path.abspath(args.script)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UsageError(f"{args.script!r} (--no-python) is not an executable file")
        return "exec", path, os.path.basename(path)
    path = os.path.abspath(args.script)
    if not os.path.isfile(path):
        raise UsageError(f"script {args.script!r} is not a file")
    return "script", path, os.path.basename(path)


def _std(value: str | None, flag: str) -> tuple[int, dict[int, int]]:
    """torchrun's -r/-t: ``3`` for every local rank, or ``0:1,1:2`` per local rank -> (all, {rank: std})
    (1 stdout, 2 stderr, 3 both)."""
    if value is None:
        return 0, {}
    try:
        if ":" not in value:
            every, per_rank = int(value), {}
        else:
            every, per_rank = 0, {int(r): int(s) for r, s in (item.split(":") for item in value.split(","))}
        if all(0 <= s <= 3 for s in (every, *per_rank.values())):
            return every, per_rank
    except ValueError:
        pass
    raise UsageError(f"{flag} {value}: expected 0-3 (1 stdout, 2 stderr, 3 both) or LOCAL_RANK:STD,... e.g. 0:3,1:2")


def _note(args: Any, total: str, max_nodes: int, logs: dict | None, name: str) -> str:
    """The one line that says which flags given a Ray cluster makes moot, and where things go, or ""."""
    parts = []
    if moot := [_spelled(args, d, "--" + d.replace("_", "-")) for d in (*_MOOT, "node_rank") if _given(args, d)]:
        parts.append(f"{', '.join(moot)}: not needed, ignored (this one command places all {total} ranks on Ray and "
                     "sets their MASTER_ADDR/MASTER_PORT; each rank is a fresh process)")
    if unsupported := [_spelled(args, d, "--" + d.replace("_", "-")) for d in _UNSUPPORTED if _given(args, d)]:
        parts.append(f"{', '.join(unsupported)}: not supported, ignored")
    if max_nodes > 1 and not os.environ.get("RAY_ADDRESS"):
        parts.append(f"--nnodes {args.nnodes}: no RAY_ADDRESS, so all {total} ranks run on this machine")
    if logs:
        parts.append(f"rank output files in {os.path.join(logs['root'], name)}")
    return "; ".join(parts)


def main(args: Any) -> int:
    """Run the script; the exit status is its outcome: 0, the failing rank's status, 1 when trainkit
    itself failed (e.g. a worker died), 2 for bad arguments; 0 at once on a node rank other than 0."""
    try:
        p = plan(args)
    except UsageError as exc:
        print(terminal_safe(f"trainkit launch: {exc}"), file=sys.stderr)
        return 2
    if p.skip:
        print(terminal_safe(f"trainkit launch: {p.skip}"), file=sys.stderr)
        return 0
    if p.note:
        print(terminal_safe(f"trainkit launch: {p.note}"), file=sys.stderr)
    flags = {**interface.LAUNCH_FLAGS, "num_workers": p.size_flag}
    # messages name --name, not RunConfig(name=...)
    with interface.command_line(flags), display.console_ranks(p.console_ranks):
        try:
            trainer = trainkit.DataParallelTrainer(
                run_script, train_loop_config=p.config,
                backend_config=LaunchConfig(signals=p.signals, shutdown_timeout_s=p.shutdown_timeout_s,
                                            framework=torch_backend()),
                scaling_config=trainkit.ScalingConfig(num_workers=p.num_workers, resources_per_worker=p.resources),
                run_config=trainkit.RunConfig(name=p.name, storage_path=args.storage_path,
                                              failure_config=trainkit.FailureConfig(max_failures=args.max_failures)))
        except ValueError as exc:
            print(terminal_safe(f"trainkit launch: {exc}"), file=sys.stderr)
            return 2
        try:
            trainer.fit()
        except SystemExit:
            if forwarder.received:  # the run ended as Ctrl-C ends it: 128 + the signal, as a shell says
                return 128 + forwarder.received[0]
            raise
        except trainkit.RunLockedError as exc:
            print(terminal_safe(f"trainkit launch: {exc}"), file=sys.stderr)
            return 1
        except trainkit.TrainingFailedError as exc:
            if isinstance(exc.__cause__, ScriptExitError):
                _record_root_cause(exc.__cause__)
                code = exc.__cause__.returncode
                return code if code > 0 else 128 - code  # killed by signal N: 128 + N, as a shell says
            return 1
    return 0


def _record_root_cause(error: ScriptExitError) -> None:
    """As torchrun's ``@record`` main does: the failing rank's error file becomes the launcher's own
    ``TORCHELASTIC_ERROR_FILE`` (when a scheduler above set one)."""
    if (path := os.environ.get("TORCHELASTIC_ERROR_FILE")) and error.error:
        try:
            with open(path, "w") as f:
                json.dump(error.error, f)
        except OSError as exc:
            print(terminal_safe(f"trainkit launch: could not write TORCHELASTIC_ERROR_FILE {path}: {exc}"),
                  file=sys.stderr)


def _seconds(value: str | float) -> tuple[float, str]:
    """(seconds, "") or (0, what is wrong)."""
    try:
        seconds = float(value)
    except ValueError:
        return 0.0, f"{value!r}: expected a number of seconds"
    return (seconds, "") if seconds >= 0 else (0.0, f"{value}: expected 0 or more seconds")


def _catchable(name: str) -> bool:
    return isinstance(getattr(signal, name, None), signal.Signals) and name not in ("SIGKILL", "SIGSTOP")
