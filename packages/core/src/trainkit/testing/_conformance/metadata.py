"""What the conformance suites read about the plugin without running it: its registry entry, its
distribution and requirements, the package index, and what loading it changes in a process."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from trainkit.testing import subprocesses

# Run as `python -c _SIDE_EFFECTS <package>`: what importing the plugin's package and loading
# plugins (TRAINKIT_PLUGINS names this one) changed in the process, as JSON {what: [before, after]}.
_SIDE_EFFECTS = r"""
import json, logging, os, signal, socket, sys, threading, warnings
import trainkit
from trainkit._internal.plugins import get_plugins

package = sys.argv[1]

def loggers():
    found = {"<root>": [logging.getLevelName(logging.root.level), [repr(h) for h in logging.root.handlers]]}
    for name, lg in sorted(logging.root.manager.loggerDict.items()):
        if isinstance(lg, logging.Logger) and not (name == package or name.startswith(package + ".")):
            found[name] = [logging.getLevelName(lg.level), [repr(h) for h in lg.handlers], lg.propagate, lg.disabled]
    return found

def snapshot():
    handlers = {}
    for sig in sorted(signal.valid_signals()):
        try:
            handlers[signal.Signals(sig).name] = repr(signal.getsignal(sig))
        except (ValueError, OSError):
            pass
    return {"warnings filters": [repr(f) for f in warnings.filters], "logging": loggers(),
            "logging.disable": logging.root.manager.disable, "signal handlers": handlers,
            "sys.excepthook": repr(sys.excepthook), "threading.excepthook": repr(threading.excepthook),
            "socket default timeout": socket.getdefaulttimeout(), "cwd": os.getcwd(), "sys.path": list(sys.path),
            "os.environ": dict(os.environ)}

def diff(before, after):
    if isinstance(before, dict) and isinstance(after, dict):
        keys = sorted(before.keys() | after.keys())
        return {k: f"{before.get(k, '<unset>')!r} -> {after.get(k, '<unset>')!r}" for k in keys
                if before.get(k) != after.get(k)}
    if isinstance(before, list) and isinstance(after, list):
        added, removed = [x for x in after if x not in before], [x for x in before if x not in after]
        return " and ".join([f"added {added}"] * bool(added) + [f"removed {removed}"] * bool(removed)) or "reordered"
    return f"{before!r} -> {after!r}"

before = snapshot()
__import__(package)
get_plugins()
after = snapshot()
changed = {}
for what in before:
    if before[what] != after[what]:
        d = diff(before[what], after[what])
        if isinstance(d, dict):
            changed.update({f"{what}[{k}]": v for k, v in d.items()})
        else:
            changed[what] = d
print(json.dumps(changed, default=repr))
"""


def _normalize(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _plugin_distribution(entry: Any) -> tuple[Any, str | None]:
    """The distribution that installs ``entry``'s plugin, and the plugin's ``FRAMEWORK``."""
    import importlib
    import importlib.metadata as md

    ep = next((ep for ep in md.entry_points(group="trainkit.plugins") if ep.name == entry.plugin), None)
    assert ep is not None and getattr(ep, "dist", None) is not None, (
        f"no installed distribution has the entry point {entry.plugin!r} in the group trainkit.plugins")
    module = importlib.import_module(ep.value.split(":")[0])
    return ep.dist, getattr(module, "FRAMEWORK", None)


def _requirements(dist: Any) -> list:
    """The distribution's requirements that apply here without extras."""
    from packaging.requirements import Requirement

    reqs = [Requirement(r) for r in dist.requires or []]
    return [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]


_UNREACHABLE = ("Could not fetch URL", "NewConnectionError", "Failed to establish a new connection",
                "Temporary failure in name resolution", "Max retries exceeded", "Network is unreachable",
                "ConnectTimeoutError", "ReadTimeoutError")


def _index_versions(name: str) -> list[str]:
    """The releases of ``name`` pip finds for this interpreter and platform on its configured index
    (newest first; [] when none); skips the test when pip or the index cannot be reached."""
    import re
    import subprocess

    try:
        done = subprocesses.run([sys.executable, "-m", "pip", "index", "versions", name, "--pre",
                                 "--disable-pip-version-check", "--timeout", "15", "--retries", "1"],
                                capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.skip(f"pip index versions {name} took over 120 s: the package index is unreachable")
    text = done.stdout + done.stderr
    if "No module named pip" in text or "unknown command" in text.lower():
        pytest.skip(f"pip (with `pip index`) is not installed in this environment: {text.strip()[-200:]}")
    if any(sign in text for sign in _UNREACHABLE):
        pytest.skip(f"the package index is unreachable (offline?): {text.strip()[-300:]}")
    if done.returncode != 0:
        if "No matching distribution found" in text:
            return []
        raise AssertionError(f"pip index versions {name} failed: {text.strip()[-1000:]}")
    found = re.search(r"Available versions: (.*)", text)
    return [v.strip() for v in found.group(1).split(",")] if found else []


def _entry_for(config_cls: type) -> Any:
    """The registry entry of ``config_cls``; if none, why: the plugins that did not load."""
    from trainkit._internal.plugins import get_plugins

    plugins = get_plugins()
    entry = next((e for e in plugins.backends.entries.values() if e.config_cls is config_cls), None)
    assert entry is not None, (f"no loaded plugin registers {config_cls.__name__} "
                               f"(registry.register(name, {config_cls.__name__}, Trainer)). {plugins.not_loaded()}")
    return entry



def trainkit_requirement_problem(dist: Any) -> str | None:
    """What is wrong with ``dist``'s requirement on trainkit-core, in words, or None: it must exist,
    pin no exact release and hold the installed core and its next bug-fix release."""
    import importlib.metadata as md

    from packaging.version import Version

    name = f"{dist.metadata['Name']} {dist.version}"
    core = Version(md.version("trainkit-core"))
    next_fix = f"{core.major}.{core.minor}.{core.micro + 1}"
    wanted = f"'trainkit-core>={core.major}.{core.minor},<{core.major}.{core.minor + 1}'"
    reqs = [r for r in _requirements(dist) if _normalize(r.name) == "trainkit-core"]
    if not reqs:
        return (f"{name} does not require trainkit-core (or only under an extra or a marker): declare the core "
                f"releases it works with in [project] dependencies, a compatible range such as {wanted}")
    for req in reqs:
        pins = [s for s in req.specifier if s.operator == "===" or (s.operator == "==" and "*" not in s.version)]
        if pins:
            return (f"{name} requires {req}: an exact pin ({', '.join(map(str, pins))}) forbids every bug-fix "
                    f"release of trainkit-core, so a user who upgrades core for a fix (to {next_fix}) cannot keep "
                    f"the plugin installed. Declare a compatible range instead, such as {wanted}")
        for version, what in ((str(core), "the installed core"), (next_fix, "core's next bug-fix release")):
            if not req.specifier.contains(version, prereleases=True):
                return (f"{name} requires {req}, which excludes trainkit-core {version} ({what}): declare a "
                        f"compatible range that allows bug-fix releases, such as {wanted}")
    return None
