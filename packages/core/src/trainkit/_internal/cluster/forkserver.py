"""The fork server: processes that start with the framework imported, each a fresh fork.

A rank's script would otherwise be a fresh ``python script.py`` that imports torch again, a second
or more each launch, and so would each Ray worker. The warm cluster's keeper (``trainkit up``) and
the embedded cluster's driver (``ray_runtime.start_fork_server``) start this server once, with the
framework imported and ``gc.freeze()``-n; it listens at once, and a request made while it loads
waits for it. A ``trainkit launch`` rank (``fork_client.ENV`` names the socket, in the user's
private directory) or a Ray worker's stand-in (``ray_worker_main.py``) asks it (``fork_client.py``,
the rank's side) and gets a forked child (``fork_child.py``, what the child does)
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

from trainkit._internal.cluster import fork_child
from trainkit._internal.cluster.fork_client import HEADER, REQUEST_TIMEOUT_S, STALE
from trainkit._internal.cluster.processes import die_with_parent, fresh_signals, listen_at

# environment variables read while Python or a framework loads (less those read only at run time)
LOAD_TIME_ENV = ("PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "LD_", "LC_", "LANG")
RUNTIME_READ = frozenset({"PYTHONUNBUFFERED", "PYTHONBREAKPOINT"})


def load_time_env(env: dict[str, str], runtime_keys: frozenset[str] = frozenset()) -> dict[str, str]:
    """The variables of ``env`` read while Python or a framework loads (less ``runtime_keys``)."""
    return {k: v for k, v in env.items() if k.startswith(LOAD_TIME_ENV) and k not in RUNTIME_READ | runtime_keys}



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
            conn.settimeout(REQUEST_TIMEOUT_S)
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
            while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
                chunk = conn.recv(65536)
                if not chunk:
                    raise ValueError("the request ended early")
                data += chunk
            request = json.loads(data[HEADER.size:HEADER.size + HEADER.unpack_from(data)[0]])
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
        home = fork_child.main_dir(request)
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



def _main(argv: list[str]) -> None:
    """``python -m trainkit._internal.cluster.forkserver SOCKET KEEPER_PID MODULE...``"""
    import importlib

    address, keeper, modules = argv[0], int(argv[1]), argv[2:]
    fresh_signals()
    die_with_parent()
    if os.getppid() != keeper:
        return  # the keeper died before the line above
    sys.modules.setdefault("trainkit._internal.cluster.forkserver", sys.modules[__name__])  # not loaded again in a child
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
        fork_child.run(request, server.env)


if __name__ == "__main__":
    _main(sys.argv[1:])
