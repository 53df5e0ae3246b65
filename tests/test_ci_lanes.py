""".ci/lanes.py runs real nox sessions (of a noxfile written here) side by side: each session's output
whole, a table of outcomes, a failed session fails the run, and a signal ends every running
session's processes."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from trainkit.testing import subprocesses

LANES = Path(__file__).parents[1] / ".ci" / "lanes.py"

NOXFILE = textwrap.dedent('''
    import os, signal, subprocess, sys, time
    from pathlib import Path
    import nox

    HERE = Path(__file__).parent

    def _meet(me, other):
        """Marks that ``me`` runs, then waits until ``other`` runs too: proof they run side by side."""
        (HERE / me).write_text(os.environ["TMPDIR"])
        while not (HERE / other).exists():
            time.sleep(0.05)

    @nox.session(venv_backend="none")
    def first(session):
        _meet("first", "second")
        for i in range(20):
            print(f"first line {i}", flush=True)

    @nox.session(venv_backend="none")
    def second(session):
        _meet("second", "first")
        for i in range(20):
            print(f"second line {i}", flush=True)

    @nox.session(venv_backend="none")
    def fine(session):
        print("fine")

    @nox.session(venv_backend="none")
    def skipper(session):
        session.skip("not today")

    @nox.session(python="3.99")
    def old_python(session):
        print("never runs")

    @nox.session(venv_backend="none")
    def broken(session):
        session.error("broken on purpose")

    @nox.session(venv_backend="none")
    def stuck(session):
        # a grandchild that ignores SIGTERM: only SIGKILL to the session's group ends it
        # its pid file appears whole (written aside, then renamed): the test reads it once it exists
        code = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "open(sys.argv[1] + '.part', 'w').write(str(os.getpid())); "
                "os.replace(sys.argv[1] + '.part', sys.argv[1]); time.sleep(600)")
        subprocess.run([sys.executable, "-c", code, str(HERE / "stuck.pid")])
''')


@pytest.fixture
def noxfile_dir(tmp_path):
    (tmp_path / "noxfile.py").write_text(NOXFILE)
    return tmp_path


def test_sessions_run_side_by_side_each_output_whole_and_a_failure_fails_the_run(noxfile_dir):
    done = subprocess.run([sys.executable, str(LANES), "--lanes", "2", "first", "second", "broken"],
                          cwd=noxfile_dir, capture_output=True, text=True, timeout=280)
    out = ANSI.sub("", done.stdout)
    assert done.returncode == 1, out + done.stderr
    for name in ("first", "second"):  # each block holds its own lines, and only those
        block = out.split(f"==== {name}: ok", 1)[1].split(f"end of {name} ", 1)[0]
        assert [line for line in block.splitlines() if " line " in line] == [f"{name} line {i}" for i in range(20)]
    # side by side, each in a TMPDIR of its own, removed when it ended
    tmpdirs = {(noxfile_dir / name).read_text() for name in ("first", "second")}
    assert len(tmpdirs) == 2 and not any(os.path.exists(tmpdir) for tmpdir in tmpdirs)
    table = out.split("== wall time per session", 1)[1]
    outcomes = {line.split()[-1]: line for line in table.splitlines() if " min  lane " in line}
    assert "ok" in outcomes["first"] and "ok" in outcomes["second"] and "failed (1)" in outcomes["broken"]
    assert "failed, skipped or not run: broken" in table


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_a_skipped_session_is_reported_in_red_and_fails_the_run(noxfile_dir):
    """nox skips a session whose interpreter is missing (exit status 0 where CI is unset): lanes.py
    reports it as skipped, in red, says how to install the interpreter, and exits 1."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR")}
    done = subprocess.run([sys.executable, str(LANES), "--lanes", "2", "fine", "skipper", "old_python"],
                          cwd=noxfile_dir, capture_output=True, text=True, timeout=280,
                          env={**env, "FORCE_COLOR": "1"})
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    table = out.split("== wall time per session", 1)[1]
    rows = {ANSI.sub("", line).split()[-1]: line for line in table.splitlines() if " min  lane " in line}
    assert "ok" in rows["fine"] and not rows["fine"].startswith("\x1b[31m")
    for name in ("skipper", "old_python"):
        assert "skipped" in rows[name] and rows[name].startswith("\x1b[31m") and rows[name].endswith("\x1b[0m")
    assert "skipped skipper: not today" in table
    assert "skipped old_python: Python interpreter 3.99 not found; install it with `pyenv install 3.99`" in table
    assert "failed, skipped or not run: skipper, old_python" in ANSI.sub("", table)
    assert "old_python: \x1b[31mskipped\x1b[0m" in out  # the header of its output, too


def test_a_signal_ends_every_running_sessions_processes(noxfile_dir):
    lanes = subprocesses.start([sys.executable, str(LANES), "--lanes", "2", "stuck"], cwd=noxfile_dir,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pid_file = noxfile_dir / "stuck.pid"
        deadline = time.monotonic() + 300  # a bound on a hang, not a speed assumption
        while not pid_file.exists():
            assert lanes.poll() is None, lanes.communicate()[0]
            assert time.monotonic() < deadline, "the stuck session started no grandchild in 300 s"
            time.sleep(0.05)
        grandchild = psutil.Process(int(pid_file.read_text()))
        os.kill(lanes.pid, signal.SIGTERM)
        out, _ = lanes.communicate(timeout=120)
        assert lanes.returncode == 128 + signal.SIGTERM, out
        assert "stopped by signal 15: ended stuck" in out and "the last lines of stuck" in out
        grandchild.wait(timeout=30)  # ended with its group (it ignores SIGTERM: by SIGKILL)
        assert not grandchild.is_running()
    finally:
        subprocesses.end(lanes)


def test_the_noxfile_finds_pyenv_pythons_under_pyenv_root(tmp_path, monkeypatch):
    pytest.importorskip("nox")
    import importlib.util

    spec = importlib.util.spec_from_file_location("trainkit_noxfile", Path(__file__).parents[1] / "noxfile.py")
    noxfile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(noxfile)
    python = tmp_path / "pyenv" / "versions" / "3.99.1" / "bin" / "python3.99"
    python.parent.mkdir(parents=True)
    python.write_text("")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    assert noxfile._interpreter("3.99") == str(python)
    monkeypatch.delenv("PYENV_ROOT")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # ~/.pyenv: none here
    assert noxfile._interpreter("3.99") == "3.99"
