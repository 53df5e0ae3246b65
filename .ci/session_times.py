"""``nox ... 2>&1 | python3 .ci/session_times.py``: passes nox's output through unchanged and at the end
prints each session's wall time, longest first (from its ``Running session`` line to the next
session's, or to the end), with its outcome and how many of the machine's cores were busy meanwhile
(its own work and anything else running: a session near all cores is CPU-bound, one well below them
waits on timers, sleeps or the network). Works with any nox version: it reads only that line
and nox's ``Session ... was successful`` / ``failed`` line."""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass

START = re.compile(r"nox > Running session (.+)$")
OUTCOME = re.compile(r"nox > Session (.+?) (was successful|failed|skipped|aborted)")


def busy_cpu_s() -> float:
    """CPU-seconds the machine has spent busy since it booted (all processes; /proc/stat), 0 elsewhere."""
    try:
        with open("/proc/stat") as stat:
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    except (OSError, ValueError):
        return 0.0
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass
class Session:
    name: str
    began: tuple[float, float]  # (time.monotonic(), busy_cpu_s()) at its start
    ended: tuple[float, float] | None = None  # the same at its end; None while it runs
    outcome: str = "?"

    def span(self, end: tuple[float, float]) -> tuple[float, float]:
        """(wall s, busy CPU-s) from its start to its end, or to ``end`` while it runs."""
        (began, busy_began), (ended, busy_ended) = self.began, self.ended or end
        return ended - began, busy_ended - busy_began


def now() -> tuple[float, float]:
    return time.monotonic(), busy_cpu_s()


def main() -> None:
    sessions: list[Session] = []
    for line in sys.stdin:
        sys.stdout.write(line)
        sys.stdout.flush()
        if match := START.search(line.rstrip("\n")):
            if sessions and sessions[-1].ended is None:
                sessions[-1].ended = now()
            sessions.append(Session(match.group(1), now()))
        elif (match := OUTCOME.search(line)) and sessions:
            sessions[-1].ended = now()
            sessions[-1].outcome = "ok" if match.group(2) == "was successful" else match.group(2)
    if not sessions:
        return
    end = now()
    total = sum(session.span(end)[0] for session in sessions)
    print(f"\n== wall time per session ({total / 60:.1f} min in all; cores busy of {os.cpu_count()}) ==")
    for session in sorted(sessions, key=lambda s: -s.span(end)[0]):
        wall, busy = session.span(end)
        print(f"{wall / 60:6.1f} min  {wall / total:4.0%}  {session.outcome:6s}  {busy / max(wall, 1e-9):4.1f}  "
              f"{session.name}")


if __name__ == "__main__":
    main()
