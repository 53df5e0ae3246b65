"""A ``fit()`` on the warm cluster without Ray in the user's process.

The warm cluster's keeper (``trainkit up``) holds a standby driver: a process that has imported Ray
and trainkit's driver and listens on ``<private dir>/driver.sock``. ``fit()`` in a process that
never imported Ray hands that standby its run instead of importing Ray (0.35 s), connecting and, at
exit, disconnecting (Ray's fixed 0.27 s): the standby takes the process's stdin, stdout and stderr
(passed over the socket), its working directory, environment, ``sys.path`` and ``sys.argv``, runs
the run's control (``Controller.run``) as this process would, and sends back the ``Result``, the
exception or the exit status, which ``fit()`` returns, raises or exits with. The training
function and its config travel pickled and are unpickled on the workers only (the standby never
imports the user's modules or the framework). Ctrl-C, SIGTERM and SIGHUP reaching this process
while it waits go on to the standby (where their disposition is still the default: see
``signals.py``), which stops the run as a driver of its own would; a standby whose process is gone
(SIGKILL) ends itself at once, as Ray ends a dead driver's workers.

Promise: a run is handed off only once the standby said it started it (its socket renamed first:
``warm.taken_marker``); until then nothing of it ran, and any refusal (no standby, one that is loading,
already taken, or not this process's twin: ``_refusal``) leaves ``fit()`` to run it here as before.
After that, ``fit()`` never runs it again. Not handed off where something of the run lives in this
process (``_stays_here``): Ray imported (it may use Ray after ``fit()``, connected as before), local
mode, driver-side callbacks, datasets or a validation function, a ``fit()`` outside the main thread,
its own ``sys.stdout``/``sys.stderr`` objects, stop-signal or ``logging`` handlers of its own, and
``trainkit launch`` (its launcher forwards more signals and filters the ranks' output).
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import logging
import os
import pickle
import signal
import socket
import struct
import sys
import threading
import traceback
import warnings
from typing import Any, Iterator

from trainkit._internal.class_ids import share_class_ids
from trainkit._internal.cluster.forkserver import site_dirs
from trainkit._internal.cluster.processes import die_with_parent, fresh_signals, listen_at
from trainkit._internal.driver.signals import STOP_SIGNALS
from trainkit.result import Result
from trainkit_warm import record as warm

_FRAME = struct.Struct("!cQ")  # kind, length
STARTED, DECLINED, RESULT, RAISED, EXITED = b"S", b"D", b"R", b"E", b"X"


class _Pickled:
    """The user's function or config as the user's process pickled it: the standby ships it to the
    workers as it came, and they unpickle it (``pickle.loads`` with cloudpickle's functions)."""

    def __init__(self, data: bytes):
        self.data = data

    def __reduce__(self) -> tuple:
        return pickle.loads, (self.data,)


# -- the user's process ---------------------------------------------------------------------------
def hand_off(controller_args: dict[str, Any]) -> Result | None:
    """Run ``Controller(**controller_args).run()`` in the warm cluster's standby driver; its
    ``Result``, or None when the run was not handed off (run it here)."""
    if _stays_here(controller_args):
        return None
    try:
        import cloudpickle

        blobs = {name: cloudpickle.dumps(controller_args[name]) for name in ("train_fn", "train_loop_config")}
        rest = cloudpickle.dumps({k: v for k, v in controller_args.items() if k not in blobs})
        warning_filters = pickle.dumps([(action, message, (category.__module__, category.__qualname__), module, line)
                                        for action, message, category, module, line in warnings.filters])
    except Exception:  # noqa: BLE001 - not picklable: the run's own check says why
        return None
    started = _started(blobs, rest, warning_filters)
    if started is None:
        return None
    conn, pid = started
    with conn, _forwarded(pid):
        reply = _receive_frame(conn)
    run = controller_args["run_config"].name or controller_args["default_name"]
    if reply is None:
        raise RuntimeError(f"the warm cluster's driver running this fit() (run {run!r}) ended without its result "
                           "(killed, or the warm cluster stopped); `trainkit show` has where the run stands")
    kind, data = reply
    if kind == RESULT:
        try:
            return pickle.loads(data)
        except Exception as exc:  # noqa: BLE001 - e.g. a return value of a class this process cannot import
            raise RuntimeError(f"run {run!r} ended in the warm cluster's driver, but its Result cannot be loaded "
                               f"here: {exc!r}; `trainkit show` has it") from None
    if kind == EXITED:
        raise SystemExit(pickle.loads(data))
    blob, where = pickle.loads(data)
    try:
        error = pickle.loads(blob)
    except Exception:  # noqa: BLE001 - not picklable, or not here: its traceback says what it was
        raise RuntimeError(f"fit() failed in the warm cluster's driver:\n{where}") from None
    where = f"raised in the warm cluster's driver that ran this fit():\n{where}"
    if hasattr(error, "add_note"):  # Python 3.11+
        error.add_note(where)
    else:
        print(where, file=sys.stderr, flush=True)
    raise error


def _stays_here(controller_args: dict[str, Any]) -> bool:
    """The run cannot be handed off: something of it lives in this process (module docstring)."""
    from trainkit._internal.tools.launch import LaunchConfig

    try:
        own_stdio = all(stream is original and stream.fileno() == fd for stream, original, fd in
                        ((sys.stdin, sys.__stdin__, 0), (sys.stdout, sys.__stdout__, 1), (sys.stderr, sys.__stderr__, 2)))
    except (AttributeError, ValueError, OSError):  # None, closed, or not a file
        own_stdio = False
    own_handlers = any(signal.getsignal(signum) not in (signal.SIG_DFL, signal.SIG_IGN, signal.default_int_handler)
                       for signum in STOP_SIGNALS)
    return "ray" in sys.modules or threading.current_thread() is not threading.main_thread() or not own_stdio \
        or own_handlers or logging.getLogger("trainkit").hasHandlers() \
        or isinstance(controller_args["backend_config"], LaunchConfig) or controller_args["run_config"].callbacks \
        or controller_args["datasets"].datasets or controller_args["validation_config"] is not None


def _umask() -> int | None:
    """This process's umask, read without changing it (another thread may be creating a file)."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def _started(blobs: dict[str, bytes], rest: bytes, warning_filters: bytes) -> tuple[socket.socket, int] | None:
    """The connection to the standby once it started the run, and its pid; None when it did not."""
    request = pickle.dumps({"executable": sys.executable, "cwd": os.getcwd(), "env": dict(os.environ),
                            "sys_path": list(sys.path), "argv": list(sys.argv), "umask": _umask(),
                            "streams": [(stream.encoding, stream.errors) for stream in (sys.stdin, sys.stdout, sys.stderr)],
                            "warnings": warning_filters, **blobs, "rest": rest})
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # shared from the look at the warm cluster's record until the standby touched its used-file
        with warm.attach_lock():
            if warm.attachable(quiet=True) is None:
                raise OSError("no warm cluster")
            conn.connect(str(warm.standby_driver_socket()))
            for stream in (sys.stdout, sys.stderr):
                stream.flush()  # what this process printed comes before what the standby prints
            frame = _FRAME.pack(b"Q", len(request)) + request
            sent = socket.send_fds(conn, [frame], [0, 1, 2])  # this process's stdio (_stays_here)
            conn.sendall(frame[sent:])
            reply = _receive_frame(conn)
    except OSError:
        reply = None
    except BaseException:  # Ctrl-C meanwhile: the standby, if it started, ends with the connection
        conn.close()
        raise
    if reply is None or reply[0] != STARTED:
        conn.close()
        return None
    return conn, int(reply[1])


@contextlib.contextmanager
def _forwarded(pid: int) -> Iterator[None]:
    """This process's stop signals go to the standby ``pid`` (where their disposition is the default one)."""
    previous = {}
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) in (signal.SIG_DFL, signal.default_int_handler):
            previous[signum] = signal.signal(signum, lambda signum, _frame: os.kill(pid, signum))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _send_frame(conn: socket.socket, kind: bytes, data: bytes = b"") -> None:
    conn.sendall(_FRAME.pack(kind, len(data)) + data)


def _receive_frame(conn: socket.socket, fds: list[int] | None = None) -> tuple[bytes, bytes] | None:
    """The next (kind, data); None when the connection ended first. With ``fds``, the file
    descriptors that came with it are appended there."""
    header = b""
    while len(header) < _FRAME.size:
        if fds is not None and not header:
            chunk, received, _, _ = socket.recv_fds(conn, _FRAME.size, 3)
            fds += received
        else:
            chunk = conn.recv(_FRAME.size - len(header))
        if not chunk:
            return None
        header += chunk
    kind, length = _FRAME.unpack(header)
    data = bytearray(length)
    view, got = memoryview(data), 0
    while got < length:
        count = conn.recv_into(view[got:])
        if not count:
            return None
        got += count
    return kind, bytes(data)


# -- the standby driver -----------------------------------------------------------------------------
def serve(keeper_pid: int) -> None:
    """The standby: load, listen, take one run and run it; dies with the keeper until taken."""
    die_with_parent()
    if os.getppid() != keeper_pid:  # it ended before the line above
        return
    started_env, started_path = dict(os.environ), list(sys.path)  # Ray's import adds some of its own
    import cloudpickle  # noqa: F401 - what unpickling the request needs
    import ray  # noqa: F401 - the 0.35 s the user's process saves

    from trainkit._internal.cluster import ray_runtime
    from trainkit._internal.driver.controller import Controller
    from trainkit._internal.plugins import get_plugins

    get_plugins()
    share_class_ids()  # a class of the user's sent back is the user's class again (class_ids.py)
    loaded_site = site_dirs()
    added_path = [entry for entry in sys.path if entry not in started_path]  # Ray's vendored packages
    path = str(warm.standby_driver_socket())
    listener, inode = listen_at(path, 8)  # found from now on
    conn, _ = listener.accept()
    try:
        if os.stat(path).st_ino != inode:
            raise OSError("not this standby's socket")
        os.rename(path, warm.taken_marker(os.getpid()))  # taken: the keeper leaves this process alone
    except OSError:  # (replaced meanwhile): the user's process runs its fit itself
        return
    listener.close()  # drivers queued behind this one are refused: they run their fits themselves
    fds: list[int] = []
    request = _receive_frame(conn, fds)
    if request is None or len(fds) != 3:
        return
    request = pickle.loads(request[1])
    request["sys_path"] = added_path + [entry for entry in request["sys_path"] if entry not in added_path]
    try:
        os.chdir(request["cwd"])
        why = _refusal(request, loaded_site, started_env)
        if why is None:
            sys.path[:] = request["sys_path"]  # what the user's modules unpickle from
            args = pickle.loads(request["rest"])
            warnings.filters[:] = _warning_filters(pickle.loads(request["warnings"]))
            warnings._filters_mutated()  # (the cache Python keeps of them)
    except Exception as exc:  # noqa: BLE001 - the user's process runs it and says what fails
        why = f"cannot load the run here: {exc!r}"
    if why is not None:
        _send_frame(conn, DECLINED, why.encode())
        sys.exit(warm.DECLINED_EXIT)
    warm.touch()  # a driver came: the keeper's idle clock starts again
    _become_the_users(request, fds)
    _send_frame(conn, STARTED, str(os.getpid()).encode())
    replied = threading.Event()
    threading.Thread(target=_end_with_the_users_process, args=(conn, replied), daemon=True).start()
    try:
        result = Controller(**args, train_fn=_Pickled(request["train_fn"]),
                            train_loop_config=_Pickled(request["train_loop_config"])).run()
        try:
            reply = RESULT, _dumps(result)
        except Exception as exc:  # noqa: BLE001 - e.g. a return value that does not pickle: the run is recorded
            raise RuntimeError(f"run {result.path!r} ended, but its Result cannot be sent back from the warm "
                               f"cluster's driver: {exc!r}; `trainkit show` has it") from None
    except SystemExit as exc:  # a stop signal: the run recorded it and said so
        reply = EXITED, pickle.dumps(exc.code)
    except BaseException as exc:  # noqa: BLE001 - raised in the user's process
        try:
            blob = _dumps(exc)
        except Exception:  # noqa: BLE001
            blob = None
        reply = RAISED, pickle.dumps((blob, traceback.format_exc()))
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    replied.set()
    with contextlib.suppress(OSError):
        _send_frame(conn, *reply)
    # Nothing of Ray's exit (a fixed 0.27 s; stuck on a cluster that is gone) after the reply: Ray
    # sees this driver's end as any driver's, and the run left nothing behind; but a cluster of its
    # own (the warm one gone before it connected) is stopped as at any driver's exit.
    if ray_runtime.embedded_node() is not None:
        ray_runtime.stop_embedded_cluster()
    os._exit(0)


def _dumps(obj: Any) -> bytes:
    """``obj`` pickled with every exception's ``__cause__`` (pickling drops it; ``trainkit launch``
    reads a script's exit status from it)."""
    import io

    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, BaseException) and obj.__cause__ is not None:
                return _with_cause, (obj.__reduce_ex__(pickle.DEFAULT_PROTOCOL), obj.__cause__)
            return super().reducer_override(obj)

    buffer = io.BytesIO()
    Pickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(obj)
    return buffer.getvalue()


def _with_cause(reduced: tuple, cause: BaseException) -> BaseException:
    error = reduced[0](*reduced[1])
    state = reduced[2] if len(reduced) > 2 else None
    if state:
        if hasattr(error, "__setstate__"):
            error.__setstate__(state)
        else:
            error.__dict__.update(state)
    error.__cause__ = cause
    return error


def _refusal(request: dict, loaded_site: dict, started_env: dict[str, str]) -> str | None:
    """Why this standby cannot be the user's driver (None: it can): another interpreter, a
    ``pip install`` since it loaded, Ray's settings differing, or a module it loaded that the
    user's ``sys.path`` (with what importing Ray adds) finds elsewhere (a checkout of trainkit, a
    ``ray.py`` beside the script)."""
    if request["executable"] != sys.executable:
        return f"another interpreter: {request['executable']}"
    if site_dirs() != loaded_site:
        return "site-packages changed since the standby driver loaded"
    env = request["env"]
    for key in sorted({*env, *started_env}):
        if key.startswith(_LOADED_WITH) and env.get(key) != started_env.get(key):
            return f"{key} differs from the standby driver's"
    for name, module in list(sys.modules.items()):
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if "." in name or name.startswith("_") or not origin or not os.path.isabs(origin):
            continue
        found = importlib.machinery.PathFinder.find_spec(name, request["sys_path"])
        if found is None or found.origin is None or os.path.realpath(found.origin) != os.path.realpath(origin):
            return f"the user's sys.path finds module {name!r} elsewhere"
    return None


def _warning_filters(filters: list[tuple]) -> list[tuple]:
    """The user's warning filters, each whose category this process has loaded: a category of a
    module not loaded here (torch's) is never warned here, and loading it would import the module."""
    loaded = []
    for action, message, (module, qualname), pattern, line in filters:
        category = sys.modules.get(module)
        for name in qualname.split("."):
            category = getattr(category, name, None)
        if isinstance(category, type) and issubclass(category, Warning):
            loaded.append((action, message, category, pattern, line))
    return loaded


# what the standby imported Ray and loaded the plugins with (plugins.py)
_LOADED_WITH = ("RAY_", "TRAINKIT_PLUGINS", "TRAINKIT_DISABLED_PLUGINS", "TRAINKIT_DISABLE_PLUGIN_AUTOLOAD",
                "TRAINKIT_PLACEMENT_TIMEOUT_S", "TRAINKIT_PREEMPTION_POLL_S")  # (read as their modules load)


def _become_the_users(request: dict, fds: list[int]) -> None:
    """This process takes the user's stdio, environment and arguments (its directory and
    ``sys.path`` it already took); it stays in the keeper's session, outside the terminal's
    process group: the user's process forwards what the terminal sends."""
    for fd, theirs in zip((0, 1, 2), fds):
        os.dup2(theirs, fd)
        os.close(theirs)
    (in_encoding, in_errors), (out_encoding, out_errors), (err_encoding, err_errors) = request["streams"]
    # this process's stdio from now on, encoded as the user's
    sys.stdin = open(0, encoding=in_encoding, errors=in_errors, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", buffering=1, encoding=out_encoding, errors=out_errors, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding=err_encoding, errors=err_errors, closefd=False)  # noqa: SIM115
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv[:] = request["argv"]
    if request["umask"] is not None:
        os.umask(request["umask"])
    die_with_parent(on=False)  # a taken standby outlives the keeper: its run records what becomes of the cluster


def _end_with_the_users_process(conn: socket.socket, replied: threading.Event) -> None:
    """The user's process is gone (its end of the connection closed before the result): SIGKILL,
    so Ray ends the run's workers as those of any dead driver."""
    with contextlib.suppress(OSError):
        while conn.recv(1 << 16):
            pass
    if not replied.is_set():
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    fresh_signals()
    serve(int(sys.argv[1]))
