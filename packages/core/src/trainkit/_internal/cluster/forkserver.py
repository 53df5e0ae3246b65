"""The fork server: processes that start with the framework imported, each a fresh fork.

A rank's script would otherwise be a fresh ``python script.py`` that imports torch again, a second
or more each launch, and so would each Ray worker. The warm cluster's keeper (``trainkit up``) and
the embedded cluster's driver (``ray_runtime.start_fork_server``) start this server once, with the
framework imported and ``gc.freeze()``-n; it listens at once, and a request made while it loads
waits for it. A ``trainkit launch`` rank (``ENV`` names the socket, in the user's private
directory) or a Ray worker's stand-in (``ray_worker_main.py``) asks it and gets a forked child
that runs the script as ``python SCRIPT ARGS`` or ``python -m MODULE ARGS`` would: its own
``__main__``, ``sys.argv``, ``sys.path[0]``, working directory, environment, a new session with
Python's default signal handling, the rank's pipes as stdio, ``sys.exit``/exception/signal exit
statuses. The server never runs a user's code, so every launch gets a fresh process that sees the
user's edits, and nothing of one run reaches the next.

The promise, and where it stops:

- The server refuses (and the rank falls back to ``python script.py``) when the child could not be
  what that command gives: another interpreter (``--no-python``, another ``sys.executable``), an
  environment variable read while Python or the preloaded framework loads (``LOAD_TIME_ENV``) set
  otherwise than in the server (the rank's own torchrun variables excepted: read at run time), the
  script's directory holding a module of a preloaded name (it would shadow it in a fresh process),
  or a site-packages directory changed since the server started (a ``pip install`` since: the
  server then retires: it stops listening, at once, and exits once the scripts it started ended,
  which it keeps serving; the keeper starts a new one meanwhile).
- A script runs only once its rank has the answer: the child waits for the server's go, sent after
  the answer. A rank whose answer is lost (the server or the rank died first) never has a script
  started for it that it does not know of, so its fresh-process fallback never runs it twice.
- The child exits as a forked ``multiprocessing`` child does: non-daemon threads joined, ``atexit``
  handlers run, ``__main__``'s globals released and collected (an unclosed file is flushed), stdio
  flushed, then ``os._exit``: the preloaded modules' teardown, which Python does not promise to run
  either, is skipped (0.2-0.3 s with torch). Before the script's first line, the child runs the
  framework's ``BackendConfig.after_fork`` (``AFTER_FORK_ENV`` names it): what the framework must
  redo in a fork (torch: its thread pools, and the process groups a script destroys kept until
  the exit, as a fresh process keeps them).
- The child dies with the rank: when the rank's connection closes before the script ended (its
  worker died) the server SIGKILLs the child's process group, and every child gets SIGKILL when the
  server dies (``PR_SET_PDEATHSIG``; not one asked to outlive it, a Ray worker, which Ray ends), the
  server when the process that started it dies. The server has a session of its own, so a signal to
  that process's group (Ctrl-C in its terminal) reaches the scripts only through their ranks.
- A child's pid is its own until its rank has read its exit status (the server keeps it a zombie,
  as a ``Popen`` child stays one until its parent waits), so the rank's signals to the script's
  process group never reach another process that got the pid meanwhile.
- Warnings the preloaded imports emit appear once, in the server's log, not in each rank's output;
  ``ps`` shows the server's command line for a child.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import selectors
import signal
import socket
import struct
import sys
from typing import Any

ENV = "TRAINKIT_FORKSERVER"  # the socket's path, in the warm cluster's processes
AFTER_FORK_ENV = "TRAINKIT_AFTER_FORK"  # in the server: ``module:Class`` whose ``after_fork`` a forked child runs
# environment variables read while Python or a framework loads (less those read only at run time)
LOAD_TIME_ENV = ("PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "LD_", "LC_", "LANG")
RUNTIME_READ = frozenset({"PYTHONUNBUFFERED", "PYTHONBREAKPOINT"})


def load_time_env(env: dict[str, str], runtime_keys: frozenset[str] = frozenset()) -> dict[str, str]:
    """The variables of ``env`` read while Python or a framework loads (less ``runtime_keys``)."""
    return {k: v for k, v in env.items() if k.startswith(LOAD_TIME_ENV) and k not in RUNTIME_READ | runtime_keys}


loaded_env: dict[str, str] | None = None  # in a forked child: the environment its preloaded modules loaded with


def after_fork() -> None:
    """In a forked child: the framework's ``after_fork(loaded_env)`` (``AFTER_FORK_ENV`` names its
    config class in the server, ``module:Class``), with the environment its modules loaded with."""
    import importlib

    module, _, name = (loaded_env or {}).get(AFTER_FORK_ENV, "").partition(":")
    if module:
        owner = importlib.import_module(module)
        for part in name.split("."):
            owner = getattr(owner, part)
        owner.after_fork(dict(loaded_env))


STALE = "site-packages changed since the fork server started"  # the refusal that retires the server
_HEADER = struct.Struct("!I")
_REQUEST_TIMEOUT_S = 10.0


# -- the rank's side ------------------------------------------------------------------------------
class ForkedScript:
    """A script the server started for this rank, as much of ``subprocess.Popen`` as launch uses."""

    def __init__(self, pid: int, conn: socket.socket, replies: Any, stdout: int | None, stderr: int | None):
        self.pid, self._conn, self._replies, self.returncode = pid, conn, replies, None
        self.stdout, self.stderr = (None if fd is None else os.fdopen(fd, "rb", buffering=0) for fd in (stdout, stderr))

    def wait(self) -> int:
        """The exit status as ``Popen.wait`` gives it (-N: killed by signal N)."""
        if self.returncode is None:
            reply = read_reply(self._replies)
            self._replies.close()
            self._conn.close()  # the server forgets the child
            self.returncode = reply["exit"] if reply else -signal.SIGKILL  # the server died: so did its child
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start(address: str, argv: list[str], mode: str, cwd: str | None, env: dict[str, str],
          runtime_keys: set[str], inherit_stdio: bool = False, outlive_server: bool = False) -> ForkedScript | str:
    """Ask the server at ``address`` to run ``argv`` (``[sys.executable, SCRIPT or "-m", MODULE,
    *args]``); the started script, or why not (then run it as a fresh process). ``runtime_keys``:
    the environment variables the caller set that the script reads at run time (never compared).
    The script's stdout and stderr are pipes the caller reads, or with ``inherit_stdio`` the
    caller's own stdio (then ``ForkedScript.stdout``/``stderr`` are None). With ``outlive_server``
    the script does not die with the server (a Ray worker: Ray ends it)."""
    if mode not in ("script", "module") or argv[0] != sys.executable:
        return f"{mode} mode, {argv[0]}: not what the fork server runs"
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if inherit_stdio:
        devnull, stdout_w, stderr_w = os.dup(0), os.dup(1), os.dup(2)
        stdout_r = stderr_r = None
    else:
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
    replies = None
    try:
        conn.settimeout(_REQUEST_TIMEOUT_S)
        conn.connect(address)
        replies = conn.makefile("rb")  # one line per answer; a short script's exit may come in the same read
        body = json.dumps({"argv": argv, "mode": mode, "cwd": cwd or os.getcwd(), "env": env,
                           "runtime_keys": sorted(runtime_keys), "outlive_server": outlive_server}).encode()
        message = _HEADER.pack(len(body)) + body
        try:
            sent = socket.send_fds(conn, [message], [devnull, stdout_w, stderr_w])
            if sent < len(message):  # (an empty sendall on a connection the server closed fails: EPIPE)
                conn.sendall(message[sent:])
        except OSError as exc:  # refused before it was read (out of descriptors): why, if it said
            reply = read_reply(replies) or {"refused": f"no answer: {exc}"}
        else:
            conn.settimeout(None)  # the answer, however slow: giving up on a child forked meanwhile would start the script twice
            reply = read_reply(replies)
    except OSError as exc:
        reply = {"refused": f"no answer: {exc}"}
    finally:
        for fd in (devnull, stdout_w, stderr_w):
            os.close(fd)
    if not reply or "pid" not in reply:
        if replies is not None:
            replies.close()
        conn.close()  # (a child forked for it meanwhile: the server kills it)
        for fd in (stdout_r, stderr_r):
            if fd is not None:
                os.close(fd)
        return (reply or {}).get("refused", "the fork server closed the connection")
    return ForkedScript(reply["pid"], conn, replies, stdout_r, stderr_r)


def read_reply(replies: Any) -> dict | None:
    """The server's next answer from ``replies`` (the connection's ``makefile("rb")``), one JSON
    line; None when the connection ended first."""
    try:
        line = replies.readline()
    except OSError:
        return None
    return json.loads(line) if line.endswith(b"\n") else None


# -- the server -----------------------------------------------------------------------------------
class _Server:
    def __init__(self, address: str):
        """Listen at ``address`` at once: a request made while the modules load waits for them."""
        self.top_level: set[str] = set()  # the preloaded modules' top-level names, once loaded
        self.env = dict(os.environ)
        self.site_dirs = site_dirs()
        # every worker of a big node may ask while the server loads
        self.listener, self.inode = listen_at(address, socket.SOMAXCONN)
        self.address = address
        self.wakeup_r, self.wakeup_w = os.pipe()
        os.set_blocking(self.wakeup_w, False)
        signal.set_wakeup_fd(self.wakeup_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd is written on each
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.selector.register(self.wakeup_r, selectors.EVENT_READ)
        self.children: dict[int, socket.socket | None] = {}  # pid -> the rank's connection (None: gone)
        self.told: set[int] = set()  # children whose exit their rank was sent: zombies until it lets go
        self.retired = False
        self.spare = os.open(os.devnull, os.O_RDONLY)  # let go of to refuse a rank when out of descriptors

    def serve(self) -> dict | None:
        """Serve until a request is accepted (returns it, in the forked child only) or, retired,
        until the last script it started ended (returns None)."""
        while not (self.retired and not self.children):
            for key, _ in self.selector.select():
                if key.fileobj is self.listener:
                    request = self._accept()
                    if request is not None:
                        return request
                    if self.retired:
                        break  # the listener is closed: the selector's other keys wait for the next select
                elif key.fileobj == self.wakeup_r:
                    os.read(self.wakeup_r, 4096)
                    self._reap()
                else:  # a rank's connection: EOF while its script runs means the rank is gone
                    self._rank_gone(key.fileobj)
        return None

    def _accept(self) -> dict | None:
        """Take one rank's request: fork its child (returns the request in the child), or refuse
        it. Nothing one request does, its resources run out included, ends the server (and with it
        every script it started)."""
        try:
            conn, _ = self.listener.accept()
        except OSError as exc:
            self._refuse_unaccepted(exc)
            return None
        fds: list[int] = []
        try:
            conn.settimeout(_REQUEST_TIMEOUT_S)
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            if uid != os.getuid():
                raise PermissionError(f"uid {uid} is not this user's")
            request, fds = self._receive(conn)
            refused = self._refusal(request)
        except Exception as exc:  # noqa: BLE001 - a malformed request: refused, the server goes on
            for fd in fds:
                os.close(fd)
            _reply(conn, {"refused": f"{type(exc).__name__}: {exc}"})
            conn.close()
            return None
        if refused:
            for fd in fds:
                os.close(fd)
            if refused == STALE:
                self._retire()  # before the answer: the next request finds no server
            _reply(conn, {"refused": refused})
            conn.close()
            return None
        pipes: list[int] = []
        try:
            pipes += os.pipe()
            pipes += os.pipe()
            server = os.getpid()
            pid = os.fork()
        except OSError as exc:  # out of descriptors, memory or processes: the rank starts a fresh process
            for fd in (*pipes, *fds):
                os.close(fd)
            _reply(conn, {"refused": f"cannot fork: {exc}"})
            conn.close()
            return None
        ready_r, ready_w, go_r, go_w = pipes
        if pid == 0:
            os.close(ready_r)
            os.close(go_w)
            self._become_child(conn, fds, server, request.get("outlive_server") is True)
            os.close(ready_w)
            if os.read(go_r, 1) != b"g":  # no go: the rank never got its answer
                os._exit(1)
            os.close(go_r)
            return request
        os.close(ready_w)
        os.close(go_r)
        os.read(ready_r, 1)  # EOF once the child has its session and its death signal (or died): as Popen's start
        os.close(ready_r)
        for fd in fds:
            os.close(fd)
        conn.settimeout(None)
        if _reply(conn, {"pid": pid}):
            try:
                os.write(go_w, b"g")
            except BrokenPipeError:  # the rank killed it already: reaped and told as any exit
                pass
            self.children[pid] = conn
            self.selector.register(conn, selectors.EVENT_READ)
        else:  # the rank is gone: its script never starts (the child exits on the closed pipe)
            self.children[pid] = None
            conn.close()
        os.close(go_w)
        return None

    def _refuse_unaccepted(self, exc: OSError) -> None:
        """``accept`` failed: out of file descriptors, the waiting rank would wait for one as long
        as the running scripts last. The spare descriptor makes room to take it and refuse it."""
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            return
        os.close(self.spare)
        try:
            conn, _ = self.listener.accept()
            _reply(conn, {"refused": f"the fork server is out of file descriptors: {exc}"})
            conn.close()
        except OSError:
            pass
        finally:
            self.spare = os.open(os.devnull, os.O_RDONLY)

    def _retire(self) -> None:
        """Stale: stop listening now (ranks then start fresh processes, and the keeper, seeing the
        socket gone, starts a new server); serve the scripts already started until they end."""
        self.retired = True
        self.selector.unregister(self.listener)
        self.listener.close()  # (ranks still queued in it get no answer: they start fresh processes)
        try:
            if os.stat(self.address).st_ino == self.inode:
                os.unlink(self.address)
        except FileNotFoundError:
            pass

    @staticmethod
    def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
        data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
        try:
            if len(fds) != 3:
                raise ValueError(f"expected 3 file descriptors, got {len(fds)}")
            while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack_from(data)[0]:
                chunk = conn.recv(65536)
                if not chunk:
                    raise ValueError("the request ended early")
                data += chunk
            request = json.loads(data[_HEADER.size:_HEADER.size + _HEADER.unpack_from(data)[0]])
            if not isinstance(request, dict) or not {"argv", "mode", "cwd", "env", "runtime_keys"} <= request.keys():
                raise ValueError("not a request")
            return request, fds
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    def _refusal(self, request: dict) -> str | None:
        """Why the child could not be what ``python SCRIPT`` gives (None: it can)."""
        if site_dirs() != self.site_dirs:
            return STALE
        if request["argv"][0] != sys.executable:
            return f"another interpreter: {request['argv'][0]}"
        runtime = frozenset(request["runtime_keys"])
        theirs, mine = load_time_env(request["env"], runtime), load_time_env(self.env, runtime)
        for key in sorted({*theirs, *mine}):
            if theirs.get(key) != mine.get(key):
                return f"{key} differs from the fork server's ({theirs.get(key)!r}, not {mine.get(key)!r})"
        home = _main_dir(request)
        try:
            shadowing = sorted(self.top_level & _importable_names(home))
        except OSError as exc:
            return f"cannot list {home}: {exc}"
        if shadowing:
            return f"{home} holds its own {', '.join(shadowing)}, which a fresh process would import"
        return None

    def _become_child(self, conn: socket.socket, fds: list[int], server: int, outlive_server: bool) -> None:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.selector.close()
        for other in (self.listener, conn, *self.children.values()):
            if other is not None:
                other.close()
        for fd in (self.wakeup_r, self.wakeup_w, self.spare):
            os.close(fd)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.setsid()
        if not outlive_server:
            die_with_parent()
        if os.getppid() != server:
            os._exit(1)  # the server died before the line above

    def _reap(self) -> None:
        """Tell each rank whose child exited its exit status. The child stays a zombie (its pid and
        process group its own, as a ``Popen`` child's stay until its parent waits) until the rank
        closes the connection: a signal the rank sends meanwhile can reach no other process."""
        for pid, conn in list(self.children.items()):
            if pid in self.told:
                continue
            try:
                ended = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                ended = None
            if ended is None:
                continue
            if conn is None:  # nobody to tell
                self._release(pid)
                continue
            code = ended.si_status if ended.si_code == os.CLD_EXITED else -ended.si_status
            _reply(conn, {"exit": code})
            self.told.add(pid)

    def _release(self, pid: int) -> None:
        self.children.pop(pid, None)
        self.told.discard(pid)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass

    def _rank_gone(self, conn: socket.socket) -> None:
        """EOF from a rank: it read its child's exit, or it died while the script runs."""
        self.selector.unregister(conn)
        for pid, owner in list(self.children.items()):
            if owner is conn:
                if pid in self.told:
                    self._release(pid)
                    continue
                try:
                    os.killpg(pid, signal.SIGKILL)  # its own session since before its pid was sent
                except ProcessLookupError:  # the whole group ended already
                    pass
                self.children[pid] = None  # reaped once it exited, nobody to tell
        conn.close()


def _reply(conn: socket.socket, message: dict) -> bool:
    """Send ``message``; False when the rank is gone."""
    try:
        conn.sendall(json.dumps(message).encode() + b"\n")
        return True
    except OSError:
        return False


def site_dirs() -> dict[str, int]:
    """The site-packages directories and their mtimes: another value later means a package was
    installed or removed since (what a process imported before may no longer be what it finds)."""
    import site

    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return {d: os.stat(d).st_mtime_ns for d in dirs if os.path.isdir(d)}


def _main_dir(request: dict) -> str:
    """``sys.path[0]`` of ``python SCRIPT`` (the script's directory) or ``python -m`` (the cwd)."""
    cwd = request["cwd"] or os.getcwd()
    if request["mode"] == "module":
        return cwd
    return os.path.dirname(os.path.join(cwd, request["argv"][1]))


def _importable_names(directory: str) -> set[str]:
    """The top-level modules and regular packages an import finds in ``directory`` (a directory
    without ``__init__`` is a namespace portion: it never shadows a module found elsewhere)."""
    from importlib.machinery import all_suffixes

    names = set()
    for entry in os.scandir(directory):
        if entry.is_dir():
            if any(os.path.exists(os.path.join(entry.path, f"__init__{suffix}")) for suffix in all_suffixes()):
                names.add(entry.name)
        else:
            names.update(entry.name[:-len(suffix)] for suffix in all_suffixes() if entry.name.endswith(suffix))
    return names


def spawn(address: str, modules: list[str] | tuple[str, ...], env: dict[str, str]) -> Any:
    """Start a fork server at ``address`` with ``modules`` preloaded, dying with this process (the
    thread that calls this): a ``subprocess.Popen``."""
    import subprocess

    # a session of its own, as the cluster's processes: Ctrl-C or a closed terminal (a signal to the
    # driver's process group) reaches the driver, which stops the run; it would end the server, and
    # with it the scripts it forked, before their ranks passed the signal on
    return subprocess.Popen([sys.executable, "-m", "trainkit._internal.cluster.forkserver", address, str(os.getpid()),
                             *modules], stdin=subprocess.DEVNULL, cwd="/", env=env, start_new_session=True)


def listen_at(address: str, backlog: int) -> tuple[socket.socket, int]:
    """A Unix socket listening at ``address`` (0600), put in place only once it listens (a dead
    listener's goes), and its inode (whether ``address`` is still this socket)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = f"{address}.{os.getpid()}"
    old_umask = os.umask(0o177)
    try:
        listener.bind(bound)
    finally:
        os.umask(old_umask)
    listener.listen(backlog)
    os.replace(bound, address)
    return listener, os.stat(address).st_ino


def die_with_parent(on: bool = True) -> None:
    """SIGKILL when the parent (the thread that started this process) ends (Linux); ``on=False``:
    no longer."""
    import ctypes

    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL if on else 0)  # PR_SET_PDEATHSIG


def default_signals() -> None:
    """The signal state a shell gives a process: nothing blocked, every disposition the default
    (Ray's processes block SIGINT, and a blocked or ignored signal outlives exec)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for signum in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):  # one the C library keeps for itself
            pass


def fresh_signals() -> None:
    """A fresh interpreter's signal state: a shell's, then what Python's start sets."""
    default_signals()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


# -- in the child ---------------------------------------------------------------------------------
def _run(request: dict) -> None:
    """Be ``python SCRIPT ARGS`` / ``python -m MODULE ARGS``, then exit."""
    import importlib
    import io
    import types

    if request["cwd"]:
        os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = request["argv"]
    sys.orig_argv = list(argv)
    sys.path[0] = os.path.abspath(_main_dir(request))
    importlib.invalidate_caches()
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    for name, fd in (("stdin", 0), ("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "rb" if fd == 0 else "wb", closefd=False)
        buffered = raw if unbuffered and fd else (io.BufferedReader(raw) if fd == 0 else io.BufferedWriter(raw))
        stream = io.TextIOWrapper(buffered, encoding=old.encoding, errors=old.errors,
                                  line_buffering=fd == 2 or raw.isatty(), write_through=unbuffered and fd != 0)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    if "numpy.random" in sys.modules:  # its global generator was seeded in the server: one seed for all
        sys.modules["numpy.random"].seed()
    code, interrupted = 0, False
    main = types.ModuleType("__main__")  # the script's own: this one (the server's, run as -m) stays as it is
    main.__dict__.update(__builtins__=__builtins__)
    sys.modules["__main__"] = main
    try:
        after_fork()
        if request["mode"] == "module":
            import runpy

            sys.argv = ["-m", *argv[3:]]
            runpy._run_module_as_main(argv[2])  # runs it in sys.modules["__main__"]
        else:
            sys.argv = argv[1:]
            path = os.path.abspath(argv[1])
            main.__dict__.update(__file__=path, __cached__=None)
            with io.open_code(path) as f:
                source = f.read()
            exec(compile(source, path, "exec"), main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        _print_exception()
        code, interrupted = 1, True
    except BaseException:  # noqa: BLE001 - the script's error, shown as Python shows it
        _print_exception()
        code = 1
    _exit(code, interrupted)


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _print_exception() -> None:
    kind, value, tb = sys.exc_info()
    tb = tb.tb_next if tb is not None else None  # without this module's frame
    sys.excepthook(kind, value.with_traceback(tb), tb)


def _exit(code: int, interrupted: bool) -> None:
    import atexit
    import threading

    try:
        threading._shutdown()  # non-daemon threads, as Python's own exit
        atexit._run_exitfuncs()
        sys.modules["__main__"].__dict__.clear()
        gc.collect()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except BaseException:  # noqa: BLE001 - an atexit handler's error is shown, as Python does
        _print_exception()
    if interrupted:  # as Python exits on an uncaught KeyboardInterrupt: by the signal itself
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _main(argv: list[str]) -> None:
    """``python -m trainkit._internal.cluster.forkserver SOCKET KEEPER_PID MODULE...``"""
    global loaded_env
    import importlib

    address, keeper, modules = argv[0], int(argv[1]), argv[2:]
    fresh_signals()
    die_with_parent()
    if os.getppid() != keeper:
        return  # the keeper died before the line above
    sys.modules.setdefault("trainkit._internal.cluster.forkserver", sys.modules[__name__])  # one loaded_env
    server = _Server(address)
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - its rank imports it again and reports the error
            print(f"trainkit fork server: cannot preload {name}: {exc}", file=sys.stderr, flush=True)
    server.top_level = {name.partition(".")[0] for name in sys.modules}
    gc.collect()
    gc.freeze()  # the children never touch the preloaded objects' GC headers: their pages stay shared
    request = server.serve()
    if request is not None:  # in a forked child; None: the retired server's last script ended
        loaded_env = server.env
        _run(request)


if __name__ == "__main__":
    _main(sys.argv[1:])
