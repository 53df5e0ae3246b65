""".ci/session_times.py: nox's output passes through unchanged; the table names each session's wall
time, outcome and the cores busy meanwhile."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / ".ci" / "session_times.py"


def test_each_session_has_its_time_outcome_and_busy_cores():
    nox_output = ("nox > Running session core\nsome test output\nnox > Session core was successful in 3 seconds\n"
                  "nox > Running session integration\nnox > Session integration failed in 1 second\n")
    out = subprocess.run([sys.executable, str(SCRIPT)], input=nox_output, capture_output=True, text=True,
                         check=True).stdout
    passed, table = out.split("\n== wall time per session", 1)
    assert passed == nox_output  # unchanged; a blank line, then the table
    rows = {line.split()[-1]: line.split() for line in table.splitlines()[1:]}
    assert rows["core"][3] == "ok" and rows["integration"][3] == "failed"
    assert all(float(row[4]) >= 0 for row in rows.values())  # cores busy meanwhile
