"""The warm cluster's fork server (``cluster/forkserver.py``) with real processes: a script it forks
behaves as ``python script.py`` does (each probe runs both ways and the results are compared), it
refuses whatever would make the child differ, and its children never outlive the rank that asked
for them or the server itself. Waits are on events, with generous bounds, never on speed."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from trainkit._internal.cluster import fork_client
from trainkit.testing import subprocesses

PROBE = textwrap.dedent('''
    import atexit, json, os, sys, threading, time
    OUT = os.environ["PROBE_OUT"]
    kind = sys.argv[1] if len(sys.argv) > 1 else ""
    facts = {"argv": sys.argv, "file": __file__, "name": __name__, "path0": sys.path[0], "cwd": os.getcwd(),
             "x": os.environ.get("PROBE_X"), "spec": __import__("re").sub(" at 0x[0-9a-f]+", "", repr(__spec__)), "main_is_module": sys.modules["__main__"].__dict__ is globals(),
             "sigint": repr(__import__("signal").getsignal(2)), "sigpipe": repr(__import__("signal").getsignal(13)),
             "blocked": sorted(__import__("signal").pthread_sigmask(0, ())), "session_leader": os.getsid(0) == os.getpid(),
             "fds": sorted(os.listdir("/proc/self/fd"))}  # nothing of the server's leaks in
    with open(OUT + ".facts", "w") as f:
        json.dump(facts, f)
    unclosed = open(OUT + ".unclosed", "w")
    unclosed.write("flushed at exit")  # never closed: Python's exit flushes it
    atexit.register(lambda: open(OUT + ".atexit", "w").close())
    def late():
        time.sleep(0.2)
        open(OUT + ".thread", "w").close()
    threading.Thread(target=late).start()  # not a daemon: the exit waits for it
    print("to stdout")
    print("to stderr", file=sys.stderr)
    if kind == "raise":
        raise ValueError("boom")
    if kind == "exit":
        sys.exit(7)
    if kind == "message":
        sys.exit("a message")
    if kind == "interrupt":
        raise KeyboardInterrupt
''')


@pytest.fixture
def server(tmp_path):
    """A fork server with numpy.random preloaded, as the warm cluster's keeper starts one."""
    address = str(tmp_path / "fs.sock")
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    user_site = Path(subprocess.run([sys.executable, "-c", "import site; print(site.getusersitepackages())"],
                                    env=env, capture_output=True, text=True, check=True).stdout.strip())
    user_site.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, "-m", "trainkit._internal.cluster.forkserver", address, str(os.getpid()),
                             "numpy.random"], env=env, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not os.path.exists(address):
        assert proc.poll() is None and time.monotonic() < deadline, "the fork server did not start"
        time.sleep(0.05)
    yield {"address": address, "env": env, "proc": proc, "user_site": user_site}
    proc.kill()
    proc.wait()


def _forked(server, argv, cwd, env=None, runtime_keys=(), mode="script"):
    return fork_client.start(server["address"], [sys.executable, *argv], mode, str(cwd),
                            env or server["env"], set(runtime_keys))


def _outcome(returncode: int, stdout: bytes, stderr: bytes, out: Path) -> dict:
    files = {suffix: (Path(f"{out}.{suffix}").read_text() if Path(f"{out}.{suffix}").exists() else None)
             for suffix in ("unclosed", "atexit", "thread")}
    facts = json.loads(Path(f"{out}.facts").read_text())
    for suffix in ("facts", "unclosed", "atexit", "thread"):
        Path(f"{out}.{suffix}").unlink(missing_ok=True)
    return {"returncode": returncode, "stdout": stdout.decode(), "stderr": stderr.decode(), "facts": facts, **files}


@pytest.mark.parametrize("kind", ["", "raise", "exit", "message", "interrupt"])
@pytest.mark.parametrize("mode", ["script", "module"])
def test_a_forked_script_is_what_python_script_gives(server, tmp_path, kind, mode):
    """``python code/probe.py`` / ``python -m code.probe`` (the server runs as ``-m`` itself: the
    module's globals are the script's own, not the server's)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "__init__.py").write_text("")
    (code / "probe.py").write_text(PROBE)
    out = tmp_path / "out"
    env = {**server["env"], "PROBE_OUT": str(out), "PROBE_X": "x", "PYTHONUNBUFFERED": "1"}
    args = ["code/probe.py" if mode == "script" else "-m", *([] if mode == "script" else ["code.probe"]),
            *([kind] if kind else [])]

    fresh = subprocesses.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, timeout=120)
    expected = _outcome(fresh.returncode, fresh.stdout, fresh.stderr, out)

    forked = _forked(server, args, tmp_path, env, runtime_keys={"PROBE_OUT", "PROBE_X", "PYTHONUNBUFFERED"}, mode=mode)
    assert not isinstance(forked, str), forked
    stdout, stderr = forked.stdout.read(), forked.stderr.read()
    got = _outcome(forked.wait(), stdout, stderr, out)

    assert got == expected
    assert server["proc"].poll() is None  # the server goes on
    if kind == "raise" and mode == "script":  # the traceback starts at the script, as Python's own
        lines = got["stderr"].splitlines()
        assert lines[lines.index("Traceback (most recent call last):") + 1].startswith(f'  File "{code / "probe.py"}"')


def test_forked_children_each_get_their_own_random_state(server, tmp_path):
    script = tmp_path / "draw.py"
    script.write_text("import numpy\nprint(numpy.random.randint(2**31))\n")
    draws = set()
    for _ in range(3):
        forked = _forked(server, [str(script)], tmp_path)
        draws.add(forked.stdout.read())
        assert forked.wait() == 0
    assert len(draws) == 3, "numpy's global generator came seeded from the server"


def test_it_refuses_what_would_make_the_child_differ(server, tmp_path):
    script = tmp_path / "job.py"
    script.write_text("print('ran')\n")
    env = server["env"]
    assert "PYTHONHASHSEED differs" in _forked(server, [str(script)], tmp_path, {**env, "PYTHONHASHSEED": "3"})
    assert "TORCH_LOGS differs" in _forked(server, [str(script)], tmp_path, {**env, "TORCH_LOGS": "+dynamo"})
    forked = _forked(server, [str(script)], tmp_path, {**env, "TORCH_LOGS": "+dynamo"}, runtime_keys={"TORCH_LOGS"})
    assert forked.stdout.read() == b"ran\n" and forked.wait() == 0  # a variable the caller says is read at run time
    assert "not what the fork server runs" in fork_client.start(server["address"], ["/bin/echo"], "exec", None, env, set())
    (tmp_path / "numpy").mkdir()  # a namespace portion: a fresh process imports the installed numpy
    forked = _forked(server, [str(script)], tmp_path)
    assert forked.stdout.read() == b"ran\n" and forked.wait() == 0
    (tmp_path / "numpy" / "__init__.py").write_text("")  # the script's own numpy: a fresh process would import it
    assert "holds its own numpy" in _forked(server, [str(script)], tmp_path)
    shutil.rmtree(tmp_path / "numpy")

    (server["user_site"] / "new.pth").write_text("")  # a package installed since the server started
    assert "site-packages changed" in _forked(server, [str(script)], tmp_path)
    assert server["proc"].wait(timeout=60) == 0  # it exits: the keeper starts a fresh one
    assert "no answer" in _forked(server, [str(script)], tmp_path)


def test_an_answer_and_the_exit_that_arrive_in_one_read_are_both_taken():
    """A short script's exit can reach the rank in the same read as the answer to its start."""
    import socket

    server, rank = socket.socketpair()
    with server, rank, rank.makefile("rb") as replies:
        server.sendall(b'{"pid": 7}\n{"exit": 3}\n')
        server.shutdown(socket.SHUT_WR)
        assert fork_client.read_reply(replies) == {"pid": 7}
        assert fork_client.read_reply(replies) == {"exit": 3}
        assert fork_client.read_reply(replies) is None  # the connection ended


RANK = textwrap.dedent('''
    import os, sys, time
    from trainkit._internal.cluster import fork_client
    forked = fork_client.start(sys.argv[1], [sys.executable, sys.argv[2]], "script",
                              os.path.dirname(sys.argv[2]), dict(os.environ), set())
    print(forked.pid, os.getsid(forked.pid), flush=True)  # its own session the moment start() returns
    time.sleep(600)
''')


def test_a_child_dies_with_the_rank_that_asked_and_with_the_server(server, tmp_path):
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(600)\n")
    rank_script = tmp_path / "rank.py"
    rank_script.write_text(RANK)
    for end in ("rank", "server"):
        rank = subprocess.Popen([sys.executable, str(rank_script), server["address"], str(sleeper)],
                                env=server["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = rank.stdout.readline()
        assert line, rank.communicate()[1]
        pid, session = map(int, line.split())
        assert session == pid  # so the server's SIGKILL of its group, even at once, reaches it
        child = psutil.Process(pid)
        assert child.ppid() == server["proc"].pid
        if end == "rank":
            rank.kill()  # the rank's worker dies: its connection closes
        else:
            server["proc"].kill()  # PR_SET_PDEATHSIG
        child.wait(timeout=60)
        rank.kill()
        rank.wait()


def test_a_stale_server_retires_and_serves_the_scripts_it_started_to_their_end(server, tmp_path):
    """A ``pip install`` while a launch runs: the next rank starts fresh, the running script lives on."""
    go = tmp_path / "go"
    waiter = tmp_path / "waiter.py"
    waiter.write_text(f"import os, sys, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\nsys.exit(3)\n")
    running = _forked(server, [str(waiter)], tmp_path)
    assert not isinstance(running, str), running

    (server["user_site"] / "new.pth").write_text("")
    assert "site-packages changed" in _forked(server, [str(waiter)], tmp_path)
    assert not os.path.exists(server["address"])  # the keeper starts a new server; ranks meanwhile start fresh
    assert "no answer" in _forked(server, [str(waiter)], tmp_path)
    assert psutil.pid_exists(running.pid) and server["proc"].poll() is None

    go.touch()
    assert running.wait() == 3  # its exit status still comes from the retired server
    assert server["proc"].wait(timeout=60) == 0  # which then exits


def _raw_request(address: str, body: bytes, fds: list[int]) -> Any:
    import socket

    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(address)
    message = fork_client.HEADER.pack(len(body)) + body
    socket.send_fds(conn, [message], fds)
    return conn


def _idle_fds(proc: psutil.Process) -> int:
    """The server's open descriptors once it waits for its next event: the last request's all
    closed (it closes some after its answer)."""
    deadline = time.monotonic() + 60
    while Path(f"/proc/{proc.pid}/wchan").read_text() != "do_epoll_wait":
        assert time.monotonic() < deadline, "the fork server never went back to waiting"
        time.sleep(0.01)
    return proc.num_fds()


def test_a_malformed_request_is_refused_and_keeps_no_descriptor(server, tmp_path):
    proc = psutil.Process(server["proc"].pid)
    before = _idle_fds(proc)
    for body in (b"{not json", b"[1, 2]", json.dumps({"argv": 1, "mode": "script", "cwd": None, "env": {},
                                                     "runtime_keys": []}).encode()):
        with open(os.devnull) as a, open(os.devnull) as b, open(os.devnull) as c, \
                _raw_request(server["address"], body, [a.fileno(), b.fileno(), c.fileno()]) as conn:
            assert "refused" in json.loads(conn.makefile("rb").readline())
    assert _idle_fds(proc) == before
    script = tmp_path / "job.py"
    script.write_text("print('ran')\n")
    forked = _forked(server, [str(script)], tmp_path)  # and it goes on serving
    assert forked.stdout.read() == b"ran\n" and forked.wait() == 0


def test_no_script_runs_for_a_rank_that_left_before_its_answer(server, tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "job.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    body = json.dumps({"argv": [sys.executable, str(script)], "mode": "script", "cwd": str(tmp_path),
                       "env": server["env"], "runtime_keys": []}).encode()
    with open(os.devnull) as a, open(os.devnull, "w") as b, open(os.devnull, "w") as c:
        _raw_request(server["address"], body, [a.fileno(), b.fileno(), c.fileno()]).close()  # gone at once
    probe = tmp_path / "probe.py"
    probe.write_text("print('next')\n")
    forked = _forked(server, [str(probe)], tmp_path)  # served after the first request was
    assert forked.stdout.read() == b"next\n" and forked.wait() == 0
    server_proc = psutil.Process(server["proc"].pid)
    for child in server_proc.children():  # the first one's child, if still there, exits without running it
        child.wait(timeout=60)
    assert not marker.exists()


def test_a_script_started_without_a_directory_runs_in_the_callers(server, tmp_path, monkeypatch):
    script = tmp_path / "where.py"
    script.write_text("import os\nprint(os.getcwd())\n")
    monkeypatch.chdir(tmp_path)
    forked = fork_client.start(server["address"], [sys.executable, str(script)], "script", None, server["env"], set())
    assert forked.stdout.read().decode().strip() == str(tmp_path)  # as Popen(cwd=None): not the server's "/"
    assert forked.wait() == 0


def test_out_of_descriptors_it_refuses_and_goes_on_serving(server, tmp_path):
    """Each step of a request that needs descriptors, failing for want of them, is a refusal (the
    rank starts a fresh process); the server, and the script it is running, go on."""
    go = tmp_path / "go"
    waiter = tmp_path / "waiter.py"
    waiter.write_text(f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n")
    running = _forked(server, [str(waiter)], tmp_path)
    assert not isinstance(running, str), running
    script = tmp_path / "job.py"
    script.write_text("print('ran')\n")
    proc = psutil.Process(server["proc"].pid)
    limits = proc.rlimit(psutil.RLIMIT_NOFILE)
    used = _idle_fds(proc)
    # room for: nothing (accept fails), the connection only (its 3 descriptors do not fit), the
    # request and one of the 2 pipes its child needs
    for room, refusal in ((0, "out of file descriptors"), (1, "expected 3 file descriptors"), (6, "cannot fork")):
        proc.rlimit(psutil.RLIMIT_NOFILE, (used + room, limits[1]))
        try:
            assert refusal in _forked(server, [str(script)], tmp_path)
        finally:
            proc.rlimit(psutil.RLIMIT_NOFILE, limits)
        assert _idle_fds(proc) == used
    forked = _forked(server, [str(script)], tmp_path)
    assert forked.stdout.read() == b"ran\n" and forked.wait() == 0
    go.touch()
    assert running.wait() == 0


def test_a_childs_pid_stays_its_own_until_its_rank_has_read_its_exit(server, tmp_path):
    """As a Popen child's does until its parent waits: a signal the rank sends to the script's
    process group after the script ended, before the rank knew, can reach no other process."""
    script = tmp_path / "short.py"
    script.write_text("import sys\nsys.exit(4)\n")
    forked = _forked(server, [str(script)], tmp_path)
    child = psutil.Process(forked.pid)
    deadline = time.monotonic() + 60
    while child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert child.is_running() and child.status() == psutil.STATUS_ZOMBIE  # ended, not yet reaped: not reusable
    assert forked.wait() == 4
    child.wait(timeout=60)  # reaped once the rank let go



def test_requests_made_while_it_loads_queue_however_many(tmp_path):
    """Every worker of a big node may ask at once while the server still imports the framework (Ray
    starts one per CPU): the requests queue until it serves them, none is refused at once (a listen
    backlog of 64 refused the 66th with EAGAIN)."""
    (tmp_path / "slowload.py").write_text("import os, time\nwhile not os.path.exists(os.environ['GO']):\n"
                                          "    time.sleep(0.01)\n")
    address, go = str(tmp_path / "fs.sock"), tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "GO": str(go)}
    proc = subprocess.Popen([sys.executable, "-m", "trainkit._internal.cluster.forkserver", address, str(os.getpid()),
                             "slowload"], env=env, stdin=subprocess.DEVNULL)
    waiting = []
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(address):
            assert proc.poll() is None and time.monotonic() < deadline, "the fork server did not start"
            time.sleep(0.05)
        for _ in range(200):  # while it loads: queued, never accepted yet
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            waiting.append(conn)
            conn.setblocking(False)
            conn.connect(address)  # a full backlog: BlockingIOError at once
        for conn in waiting:
            conn.close()  # (the server takes each as a malformed request and goes on)
        go.touch()
        script = tmp_path / "scripts" / "ok.py"  # (not beside slowload.py: a fresh process would import that one)
        script.parent.mkdir()
        script.write_text("print('served')\n")
        child = fork_client.start(address, [sys.executable, str(script)], "script", str(script.parent), env, set())
        assert not isinstance(child, str), child
        assert child.wait() == 0 and child.stdout.read() == b"served\n"
    finally:
        for conn in waiting:
            conn.close()
        proc.kill()
        proc.wait()
