"""The watchdog that reaps an embedded cluster after its driver died kills that cluster's processes
only: never a process that took the pid of one of them after it ended. Pids are reused for real
here: the test runs in a PID namespace of its own, where the next pid is set (``ns_last_pid``)."""

import os
import shutil
import subprocess
import sys

import pytest

from trainkit.testing import subprocesses

IN_A_PID_NAMESPACE = r'''
import os, subprocess, sys, time
from trainkit._internal.cluster import watchdog

def start_as(pid, argv):
    """``argv`` started as process ``pid``: nothing else forks in this namespace."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid - 1))
    proc = subprocess.Popen(argv)
    assert proc.pid == pid, (proc.pid, pid)
    return proc

def children(pid):
    return open(f"/proc/{pid}/task/{pid}/children").read().split()

raylet = subprocess.Popen(["sleep", "600"])  # the cluster's root processes, as Ray starts them
gcs = subprocess.Popen(["sh", "-c", "sleep 600 & wait"])
while not children(gcs.pid):
    time.sleep(0.01)
[agent] = children(gcs.pid)
watchdog.start([raylet.pid, gcs.pid])
raylet.kill()
raylet.wait()  # the cluster stops; the driver lives on, and so does its watchdog
# A process is known by pid and start time, counted in clock ticks (10 ms): here the pid is reused at
# once, which the kernel does only after handing out every other pid, never within one tick.
time.sleep(0.05)
other = start_as(raylet.pid, ["sleep", "600"])  # someone else's process, with the raylet's old pid
watchdog._watchdog.stdin.close()  # the pipe closes as when the driver dies
watchdog._watchdog.wait(timeout=60)
try:
    other.wait(timeout=2)  # a wrongly killed process ends at once; a spared one runs on
except subprocess.TimeoutExpired:
    print("other: running")
print(f"gcs: {gcs.wait(timeout=60)}")  # the cluster's, alive when its driver went
agent = int(agent)  # the gcs's child, now this process's (PID 1 adopts orphans)
print(f"agent: {os.waitstatus_to_exitcode(os.waitpid(agent, 0)[1])}")
'''


def pid_namespace_missing() -> str | None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return "needs root and util-linux's unshare (a PID namespace of the test's own)"
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True)
    return f"unshare --pid failed: {probe.stderr.strip()}" if probe.returncode else None


@pytest.mark.skipif(bool(why := pid_namespace_missing()), reason=why or "")
def test_a_process_that_took_a_finished_roots_pid_is_not_killed():
    out = subprocesses.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", IN_A_PID_NAMESPACE],
                           capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:3] == ["other: running", "gcs: -9", "agent: -9"], out.stdout
