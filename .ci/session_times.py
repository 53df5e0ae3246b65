"""``nox ... 2>&1 | python3 .ci/session_times.py``: passes nox's output through unchanged and at the end
prints each session's wall time, longest first (from its ``Running session`` line to the next
session's, or to the end), with its outcome and how many of the machine's cores were busy meanwhile
(its own work and anything else running: a session near all cores is CPU-bound, one well below them
waits on timers, sleeps or the network). Works with any nox version: it reads only that line
and nox's ``Session ... was successful`` / ``failed`` line."""

import os
import re
import sys
import time

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


def main() -> None:
    sessions: list[list] = []  # [name, began, ended, outcome, busy CPU-s when it began, when it ended]
    for line in sys.stdin:
        sys.stdout.write(line)
        sys.stdout.flush()
        now = time.monotonic()
        if match := START.search(line.rstrip("\n")):
            busy = busy_cpu_s()
            if sessions and sessions[-1][2] is None:
                sessions[-1][2], sessions[-1][5] = now, busy
            sessions.append([match.group(1), now, None, "?", busy, None])
        elif (match := OUTCOME.search(line)) and sessions:
            sessions[-1][2], sessions[-1][5] = now, busy_cpu_s()
            sessions[-1][3] = "ok" if match.group(2) == "was successful" else match.group(2)
    end, end_busy = time.monotonic(), busy_cpu_s()
    if not sessions:
        return
    total = sum((ended or end) - began for _, began, ended, *_ in sessions)
    print(f"\n== wall time per session ({total / 60:.1f} min in all; cores busy of {os.cpu_count()}) ==")
    for name, began, ended, outcome, busy_began, busy_ended in sorted(sessions, key=lambda s: s[1] - (s[2] or end)):
        seconds = (ended or end) - began
        cores = ((busy_ended or end_busy) - busy_began) / max(seconds, 1e-9)
        print(f"{seconds / 60:6.1f} min  {seconds / total:4.0%}  {outcome:6s}  {cores:4.1f}  {name}")


if __name__ == "__main__":
    main()
