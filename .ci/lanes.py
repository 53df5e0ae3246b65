"""``python .ci/lanes.py [--lanes N] SESSION... [-- PYTEST_ARGS]``: runs nox sessions side by side,
``N`` at a time, taking them in the order given (longest first, so that the short ones fill in at the
end). ``nox -t ci`` runs CI's sessions through it.

Why side by side: one session at a time leaves a 2-core machine half idle (integration waits on Ray's
starts, timers and the multihost links with one core busy), and on a shared machine the scheduler
divides the CPU between process sessions, so one session gets a third of two cores beside two busy
loops. Each session runs as ``nox -s NAME`` in a process session of its own, with a ``TMPDIR`` of its
lane's (its pytest directories, its Ray clusters' files apart from the others').

A session's output is printed whole when it ends, after a header with its outcome and wall time;
while sessions run, a line every few minutes names them and their last
output line. At the end: a table of every session, longest first, a session that did not pass in red.
A session nox skipped (exit status 0, e.g. its Python interpreter is missing: nox skips it where
``CI`` is unset) is reported as skipped, with nox's reason and, for a missing interpreter, how to
install it; it counts as not passed. Exit status 1 if any failed or was skipped. On
SIGINT, SIGTERM or SIGHUP every running session's process group is ended (TERM, then KILL)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

GRACE_S = 10  # a session's processes get this long after SIGTERM before SIGKILL
PROGRESS_S = 300  # how often the running sessions are named
# each session leaves part of a core idle (waiting on Ray starts, timers, downloads), and beside other
# jobs each gets its own share of the CPU (CI beside two busy loops: 42.4 min with 3 at a time, 67 with 1)
DEFAULT_LANES = min((os.cpu_count() or 2) + 2, 4)
SKIPPED = re.compile(r"^nox > Session (?P<name>.+?) skipped: (?P<reason>.*?)\.?$", re.M)
MISSING_PYTHON = re.compile(r"Python interpreter (?P<version>\S+?) not found")
RED, RESET = "\033[31m", "\033[0m"


def skip_reason(log_text: str) -> str | None:
    """Why nox skipped the session whose output is ``log_text`` (None: it was not skipped), with how to
    get a missing interpreter."""
    found = SKIPPED.search(re.sub(r"\x1b\[[0-9;]*m", "", log_text))  # nox colours its lines with FORCE_COLOR
    if found is None:
        return None
    reason = found.group("reason")
    if missing := MISSING_PYTHON.search(reason):
        version = missing.group("version")
        reason += (f"; install it with `pyenv install {version}` (the noxfile looks in $PYENV_ROOT/versions, "
                   f"default ~/.pyenv/versions) or put python{version} on PATH")
    return reason


def _colour() -> bool:
    """Red for sessions that did not pass: on a terminal, on CI (its log shows colours) or with FORCE_COLOR."""
    if os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty() or bool(os.environ.get("FORCE_COLOR") or os.environ.get("CI"))


def red(text: str) -> str:
    return f"{RED}{text}{RESET}" if _colour() else text


@dataclass
class Session:
    name: str
    lane: int = 0
    started: float = 0.0
    ended: float | None = None
    outcome: str = "not run"
    reason: str | None = None  # why nox skipped it
    log: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)

    def wall_s(self, now: float) -> float:
        return ((self.ended or now) - self.started) if self.started else 0.0


class Lanes:
    def __init__(self, names: list[str], lanes: int, pytest_args: list[str]):
        self.queue = [Session(name) for name in names]
        self.sessions = list(self.queue)
        self.lanes = lanes
        self.pytest_args = pytest_args
        self.lock = threading.Lock()
        self.stopping = False
        self.began = time.monotonic()

    def run(self) -> int:
        print(f"== {len(self.queue)} sessions, {self.lanes} at a time: {', '.join(s.name for s in self.queue)}",
              flush=True)
        workers = [threading.Thread(target=self._lane, args=(lane,), daemon=True) for lane in range(1, self.lanes + 1)]
        for worker in workers:
            worker.start()
        while any(worker.is_alive() for worker in workers):
            deadline = time.monotonic() + PROGRESS_S
            for worker in workers:
                worker.join(timeout=max(0.0, deadline - time.monotonic()))
            if any(worker.is_alive() for worker in workers):
                self._progress()
        self._table()
        return 0 if all(s.outcome == "ok" for s in self.sessions) else 1

    def _lane(self, lane: int) -> None:
        while True:
            with self.lock:
                if self.stopping or not self.queue:
                    return
                session = self.queue.pop(0)
            tmp = _short_dir()
            try:
                self._run(session, lane, tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)

    def _run(self, session: Session, lane: int, tmp: Path) -> None:
        session.lane, session.started, session.log = lane, time.monotonic(), tmp / "nox.log"
        command = [sys.executable, "-m", "nox", "-s", session.name]
        if self.pytest_args:
            command += ["--", *self.pytest_args]
        with open(session.log, "w") as log:
            with self.lock:
                if self.stopping:
                    return
                session.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                                   stderr=subprocess.STDOUT, start_new_session=True,
                                                   env={**os.environ, "TMPDIR": str(tmp)})
            print(f"[{self._clock()}] lane {lane}: {session.name}", flush=True)
            code = session.process.wait()
        session.ended = time.monotonic()
        session.outcome = "ok" if code == 0 else f"failed ({code})"
        if code == 0 and (reason := skip_reason(session.log.read_text(errors="replace"))) is not None:
            session.outcome, session.reason = "skipped", reason
        with self.lock:  # one session's output at a time, whole
            outcome = session.outcome if session.outcome == "ok" else red(session.outcome)
            print(f"\n{'=' * 20} {session.name}: {outcome}, {session.wall_s(session.ended) / 60:.1f} min "
                  f"(lane {lane}) {'=' * 20}", flush=True)
            sys.stdout.write(session.log.read_text(errors="replace"))
            print(f"{'=' * 20} end of {session.name} {'=' * 20}\n", flush=True)

    def _clock(self) -> str:
        return f"{(time.monotonic() - self.began) / 60:5.1f} min"

    def _progress(self) -> None:
        now = time.monotonic()
        for s in self.sessions:
            if s.started and s.ended is None and s.log:
                print(f"[{self._clock()}] lane {s.lane}: {s.name} running {s.wall_s(now) / 60:.1f} min; "
                      f"last line: {_tail(s.log, 1)[:160]}", flush=True)

    def _table(self) -> None:
        now = time.monotonic()
        print(f"\n== wall time per session ({(now - self.began) / 60:.1f} min in all, {self.lanes} at a time) ==")
        for s in sorted(self.sessions, key=lambda s: -s.wall_s(now)):
            line = f"{s.wall_s(now) / 60:6.1f} min  lane {s.lane}  {s.outcome:11s} {s.name}"
            print(line if s.outcome == "ok" else red(line))
        for s in self.sessions:
            if s.reason is not None:
                print(red(f"skipped {s.name}: {s.reason}"))
        failed = [s.name for s in self.sessions if s.outcome != "ok"]
        print(red(f"failed, skipped or not run: {', '.join(failed)}") if failed else "every session passed",
              flush=True)

    def stop(self, signum: int, _frame) -> None:
        """Ends every running session's process group: SIGTERM, then SIGKILL after GRACE_S."""
        with self.lock:
            self.stopping = True
            ended = [s for s in self.sessions if s.process and s.ended is None]
        names = ", ".join(s.name for s in ended) or "nothing"
        running = [s.process for s in ended]
        for process in running:
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and any(_group_alive(p.pid) for p in running):
            time.sleep(0.2)
        for process in running:
            _signal_group(process.pid, signal.SIGKILL)
        print(f"\n== stopped by signal {signum}: ended {names}", flush=True)
        for s in ended:
            print(f"{'=' * 20} the last lines of {s.name} {'=' * 20}\n{_tail(s.log, 40)}", flush=True)
            shutil.rmtree(s.log.parent, ignore_errors=True)
        os._exit(128 + signum)


def _short_dir() -> Path:
    """A new directory ``/tmp/ciN`` (the first N free): Ray's unix socket paths below a session's
    TMPDIR must fit in 107 characters, and tests nest temporary directories of their own in it."""
    for n in range(1, 10_000):
        path = Path(f"/tmp/ci{n}")
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue
    raise RuntimeError("no free /tmp/ciN directory (N < 10000): remove stale ones")


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _tail(log: Path, lines: int) -> str:
    """The last ``lines`` non-blank lines of ``log`` ("" if it cannot be read)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 200 * lines))
            kept = [line for line in f.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return "\n".join(kept[-lines:])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, pytest_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="python .ci/lanes.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=int, default=int(os.environ.get("TRAINKIT_CI_LANES", DEFAULT_LANES)),
                        help=f"sessions at a time (default: cores + 2, at most 4; here {DEFAULT_LANES}; "
                             "or TRAINKIT_CI_LANES)")
    parser.add_argument("sessions", nargs="+", help="nox session names, longest first")
    args = parser.parse_args(own)
    if args.lanes < 1:
        parser.error(f"--lanes={args.lanes} is invalid: at least 1")
    lanes = Lanes(args.sessions, args.lanes, pytest_args)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lanes.stop)
    return lanes.run()


if __name__ == "__main__":
    sys.exit(main())
