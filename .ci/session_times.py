"""``nox ... 2>&1 | python3 .ci/session_times.py``: passes nox's output through unchanged and at the end
prints each session's wall time, longest first (from its ``Running session`` line to the next
session's, or to the end), with its outcome. Works with any nox version: it reads only that line
and nox's ``Session ... was successful`` / ``failed`` line."""

import re
import sys
import time

START = re.compile(r"nox > Running session (.+)$")
OUTCOME = re.compile(r"nox > Session (.+?) (was successful|failed|skipped|aborted)")


def main() -> None:
    sessions: list[list] = []  # [name, began, ended, outcome]
    for line in sys.stdin:
        sys.stdout.write(line)
        sys.stdout.flush()
        now = time.monotonic()
        if match := START.search(line.rstrip("\n")):
            if sessions and sessions[-1][2] is None:
                sessions[-1][2] = now
            sessions.append([match.group(1), now, None, "?"])
        elif (match := OUTCOME.search(line)) and sessions:
            sessions[-1][2], sessions[-1][3] = now, "ok" if match.group(2) == "was successful" else match.group(2)
    end = time.monotonic()
    if not sessions:
        return
    total = sum((ended or end) - began for _, began, ended, _ in sessions)
    print(f"\n== wall time per session ({total / 60:.1f} min in all) ==")
    for name, began, ended, outcome in sorted(sessions, key=lambda s: s[1] - (s[2] or end)):
        seconds = (ended or end) - began
        print(f"{seconds / 60:6.1f} min  {seconds / total:4.0%}  {outcome:6s}  {name}")


if __name__ == "__main__":
    main()
