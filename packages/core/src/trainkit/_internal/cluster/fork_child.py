"""In a child the fork server forked (``forkserver.py``): become ``python SCRIPT ARGS`` / ``python -m
MODULE ARGS`` (its ``__main__``, argv, ``sys.path[0]``, directory, environment and stdio), run the
framework's ``after_fork`` first, and exit as a forked ``multiprocessing`` child does.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from typing import Any

AFTER_FORK_ENV = "TRAINKIT_AFTER_FORK"  # in the server: ``module:Class`` whose ``after_fork`` a forked child runs

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


def main_dir(request: dict) -> str:
    """``sys.path[0]`` of ``python SCRIPT`` (the script's directory) or ``python -m`` (the cwd)."""
    cwd = request["cwd"] or os.getcwd()
    if request["mode"] == "module":
        return cwd
    return os.path.dirname(os.path.join(cwd, request["argv"][1]))


def run(request: dict, env: dict[str, str]) -> None:
    """Be the script ``request`` names, its framework's modules loaded with ``env``; then exit."""
    global loaded_env
    loaded_env = env
    _run(request)


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
    sys.path[0] = os.path.abspath(main_dir(request))
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

