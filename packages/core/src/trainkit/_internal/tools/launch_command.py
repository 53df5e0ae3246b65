"""``trainkit launch``'s command line: checks its arguments, then runs the script on N workers
through a ``DataParallelTrainer`` with ``launch.run_script`` as its training function."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

import trainkit
from trainkit._internal import interface
from trainkit._internal.terminal import terminal_safe
from trainkit._internal.tools.launch import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    DEFAULT_SIGNALS,
    LaunchConfig,
    forwarder,
    run_script,
)
from trainkit.errors import ScriptExitError


def add_arguments(parser: Any) -> None:
    parser.add_argument("--nproc", type=int, default=1, help="how many workers (ranks) run the script (default: 1)")
    parser.add_argument("--max-failures", type=int, default=0,
                        help="restart all ranks this many times after a rank fails (-1: always; default: 0)")
    parser.add_argument("--name", help="the run's name (default: <script>_<date>)")
    parser.add_argument("--storage-path", help="where the run directory goes (default: $TRAINKIT_STORAGE_PATH, "
                        "else ~/trainkit_results)")
    parser.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs each worker reserves (default: 1)")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs each worker reserves (default: 0)")
    parser.add_argument("--shutdown-timeout", type=float, default=None, metavar="SECONDS",
                        help="after a signal to the launcher, or a rank's failure, the ranks still running are "
                        "SIGKILLed this long after their SIGTERM (default: $TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30)")
    parser.add_argument("--signals-to-handle", default=DEFAULT_SIGNALS, metavar="SIGNALS",
                        help="signals the launcher sends on to every rank as they are (default: %(default)s)")
    parser.add_argument("script", help="the Python script, run as `python SCRIPT ARGS...` on every rank")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's arguments")


def main(args: Any) -> int:
    """Run the script; the exit status is its outcome: 0, the failing rank's status, 1 when trainkit
    itself failed (e.g. a worker died), 2 for bad arguments."""
    script = os.path.abspath(args.script)
    shutdown_timeout = args.shutdown_timeout
    if shutdown_timeout is None:
        shutdown_timeout = os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(DEFAULT_SHUTDOWN_TIMEOUT_S))
    shutdown_timeout, timeout_problem = _seconds(shutdown_timeout)
    signals = [name.strip() for name in args.signals_to_handle.split(",") if name.strip()]
    unknown = [name for name in signals if not _catchable(name)]
    problems = [f"--nproc {args.nproc}: expected 1 or more" if args.nproc < 1 else "",
                f"--max-failures {args.max_failures}: expected -1 or more" if args.max_failures < -1 else "",
                f"--shutdown-timeout {timeout_problem}" if timeout_problem else "",
                f"--signals-to-handle {','.join(unknown)}: expected signal names a process can catch, e.g. "
                f"{DEFAULT_SIGNALS},SIGUSR1" if unknown else "",
                f"script {args.script!r} is not a file" if not os.path.isfile(script) else ""]
    if problem := next((p for p in problems if p), None):
        print(terminal_safe(f"trainkit launch: {problem}"), file=sys.stderr)
        return 2
    resources = {"CPU": args.cpus_per_worker, **({"GPU": args.gpus_per_worker} if args.gpus_per_worker else {})}
    name = args.name or f"{os.path.splitext(os.path.basename(script))[0]}_{time.strftime('%Y-%m-%d_%H-%M-%S')}"
    config = {"script": script, "args": list(args.script_args), "cwd": os.getcwd(),
              "max_restarts": args.max_failures, "signals": signals}
    with interface.command_line(interface.LAUNCH_FLAGS):  # messages name --name, not RunConfig(name=...)
        try:
            trainer = trainkit.DataParallelTrainer(
                run_script, train_loop_config=config,
                backend_config=LaunchConfig(signals=tuple(signals), shutdown_timeout_s=shutdown_timeout),
                scaling_config=trainkit.ScalingConfig(num_workers=args.nproc, resources_per_worker=resources),
                run_config=trainkit.RunConfig(name=name, storage_path=args.storage_path,
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
