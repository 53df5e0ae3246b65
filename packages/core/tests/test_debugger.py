"""breakpoint() in a rank opens pdb in the terminal that started the run: a real fit() and a real
`trainkit launch`, driven through a real pty; off a terminal it warns, naming the rank."""

import json
import os
import re
import select
import subprocess
import sys
import textwrap
import time

import pytest

import trainkit
from trainkit.testing import subprocesses

FIT = textwrap.dedent('''
    import sys
    import trainkit

    def train():
        rank = trainkit.get_context().get_world_rank()
        some_local = "value-of-rank-%d" % rank
        if rank in RANKS:
            breakpoint()
        trainkit.report({"rank": rank, "seen": some_local})

    RANKS = [int(r) for r in sys.argv[3].split(",")]
    workers = int(sys.argv[4]) if len(sys.argv) > 4 else 2  # 0: local mode, in this process
    result = trainkit.DataParallelTrainer(
        train, scaling_config=trainkit.ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 0.5}),
        run_config=trainkit.RunConfig(name=sys.argv[2], storage_path=sys.argv[1],
                                      failure_config=trainkit.FailureConfig(progress_timeout_s=10))).fit()
    print("FIT-DONE", result.error)
    if sys.stdin.isatty():
        breakpoint()  # the driver's own: plain pdb, not Ray's debugger that starting Ray set up
        print("DRIVER-DONE")
''')

LAUNCHED = textwrap.dedent('''
    import os
    some_local = "launched-rank-" + os.environ["RANK"]
    if os.environ["RANK"] == "1":
        breakpoint()
    print("script done", some_local)
''')

PROMPT = re.compile(rb"\(Pdb rank (\d)\) ")


class Terminal:
    """A process whose stdin, stdout and stderr are a real pty; ``expect`` reads until a pattern shows."""

    def __init__(self, argv, env):
        self.master, slave = os.openpty()
        self.proc = subprocesses.start(argv, stdin=slave, stdout=slave, stderr=slave, env=env)
        os.close(slave)
        self.seen = b""  # everything read so far
        self._unread = 0  # where the next expect starts looking

    def expect(self, pattern):
        pattern = re.compile(re.escape(pattern.encode()) if isinstance(pattern, str) else pattern)
        give_up = time.monotonic() + 240  # a guard against a hang (the status line ticks on), not a wait
        while not (match := pattern.search(self.seen, self._unread)):
            ready, _, _ = select.select([self.master], [], [], max(0, give_up - time.monotonic()))
            try:
                chunk = os.read(self.master, 65536) if ready else b""
            except OSError:  # EIO: every process holding the pty's other end exited
                chunk = b""
            if not chunk:
                raise AssertionError(f"{pattern.pattern!r} never showed; the terminal got:\n"
                                     f"{self.seen[-4000:].decode(errors='replace')}")
            self.seen += chunk
        self._unread = match.end()
        return match

    def send(self, line):
        os.write(self.master, line.encode() + b"\n")

    def close(self):
        subprocesses.end(self.proc)  # its process group and the Ray session under it
        os.close(self.master)


@pytest.fixture
def terminal():
    opened = []

    def start(*argv):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
        opened.append(Terminal([sys.executable, *argv], {**env, "COLUMNS": "200", "TERM": "xterm"}))
        return opened[-1]

    yield start
    for term in opened:
        term.close()


def _continue_to_the_drivers_own_breakpoint_and_exit(term) -> None:
    """The last rank continues; fit() returns; the driver's own breakpoint() is plain pdb (not Ray's)."""
    term.send("c")
    term.expect("FIT-DONE None")
    term.expect("(Pdb) ")
    term.send("c")
    term.expect("DRIVER-DONE")
    assert term.proc.wait() == 0


def test_breakpoint_in_two_ranks_of_fit_opens_pdb_in_the_drivers_terminal_one_rank_at_a_time(tmp_path, terminal):
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    term = terminal(str(script), str(tmp_path), "fit", "0,1")
    first = int(term.expect(PROMPT).group(1))
    term.send("p some_local")
    term.expect(f"'value-of-rank-{first}'")
    term.expect(f"(Pdb rank {first}) ")
    # in the debugger longer than FailureConfig.progress_timeout_s (10 s): hang detection waits
    term.send("!import time; time.sleep(12); print('slept')")
    term.expect("slept")
    term.expect(f"(Pdb rank {first}) ")
    assert f"(Pdb rank {1 - first})".encode() not in term.seen  # the other rank waits its turn
    term.send("c")
    second = int(term.expect(PROMPT).group(1))
    assert second == 1 - first
    term.send("p some_local")
    term.expect(f"'value-of-rank-{second}'")
    _continue_to_the_drivers_own_breakpoint_and_exit(term)
    state = json.loads((tmp_path / "fit" / "run_state.json").read_text())
    assert state["status"] == "finished"
    assert trainkit.Result.from_path(str(tmp_path / "fit")).metrics == {"rank": 0, "seen": "value-of-rank-0"}


def test_breakpoint_in_local_mode_opens_pdb_with_the_display_handed_over(tmp_path, terminal):
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    term = terminal(str(script), str(tmp_path), "local", "0", "0")
    term.expect("(Pdb rank 0) ")
    term.send("p some_local")
    term.expect("'value-of-rank-0'")
    term.expect("(Pdb rank 0) ")
    _continue_to_the_drivers_own_breakpoint_and_exit(term)


def test_breakpoint_in_a_launched_script_opens_pdb_in_the_launchers_terminal(tmp_path, terminal):
    script = tmp_path / "train.py"
    script.write_text(LAUNCHED)
    term = terminal("-m", "trainkit.cli", "launch", "--nproc", "2", "--cpus-per-worker", "0.5",
                    "--storage-path", str(tmp_path / "runs"), "--name", "launched", str(script))
    term.expect("(Pdb rank 1) ")
    term.send("p some_local")
    term.expect("'launched-rank-1'")
    term.expect("(Pdb rank 1) ")
    term.send("c")
    term.expect("(rank 1) script done launched-rank-1")
    assert term.proc.wait() == 0, term.seen[-3000:].decode(errors="replace")


@pytest.mark.parametrize("user_setting", [None, "0"])
def test_without_a_terminal_breakpoint_warns_naming_the_rank_and_the_run_goes_on(tmp_path, user_setting):
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONBREAKPOINT"}
    if user_setting is not None:  # the user's own PYTHONBREAKPOINT (0: breakpoint() does nothing) holds
        env["PYTHONBREAKPOINT"] = user_setting
    out = subprocesses.run([sys.executable, str(script), str(tmp_path), "notty", "1"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0 and "FIT-DONE None" in out.stdout, out.stderr[-3000:]
    warned = "breakpoint() in rank 1 ignored: the run's driver has no terminal" in out.stdout + out.stderr
    assert warned == (user_setting is None), out.stdout + out.stderr
    assert "debugpy" not in out.stdout + out.stderr
