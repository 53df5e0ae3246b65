"""The checks of ``BackendConformance`` that need no Ray: what importing and loading the plugin does
to a process, and what its distribution's metadata declares."""

from __future__ import annotations

import json
import os
import sys

import pytest

from trainkit.testing import subprocesses
from trainkit.testing._conformance.metadata import (
    _SIDE_EFFECTS,
    _entry_for,
    _index_versions,
    _normalize,
    _plugin_distribution,
    _requirements,
    trainkit_requirement_problem,
)


class PackagingChecks:
    """Mixed into ``BackendConformance``: reads ``backend_config`` and ``framework_modules``."""

    def test_loading_plugins_imports_no_framework(self) -> None:
        assert self.framework_modules, "set framework_modules to the framework's top-level modules, e.g. ('torch',)"
        package = type(self.backend_config).__module__.split(".")[0]
        code = (f"import json, sys, trainkit, {package}\n"
                "from trainkit._internal.plugins import get_plugins\n"
                "plugins = get_plugins()\n"
                "print(json.dumps({'imported': sorted(m for m in %r if m in sys.modules),\n"
                "                  'registered': [e.config_cls.__name__ for e in plugins.backends.entries.values()],\n"
                "                  'not_loaded': plugins.not_loaded()}))"
                % (self.framework_modules,))
        out = subprocesses.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        report = json.loads(out.stdout.strip().splitlines()[-1])
        assert report["imported"] == [], f"importing {package} and loading plugins imported {report['imported']}"
        name = type(self.backend_config).__name__
        assert name in report["registered"], f"no loaded plugin registers {name}. {report['not_loaded']}"

    def test_loading_the_plugin_changes_no_process_state(self) -> None:
        """Importing the plugin's package and loading its entry point (as ``trainkit`` does in every
        process) leave the process as they found it: warnings filters, logging (the root logger's
        handlers and level, other packages' loggers), signal handlers, the excepthooks, the working
        directory, ``sys.path`` and ``os.environ``."""
        entry = _entry_for(type(self.backend_config))
        package = type(self.backend_config).__module__.split(".")[0]
        env = {**os.environ, "TRAINKIT_PLUGINS": entry.plugin}  # trainkit loads this plugin alone
        out = subprocesses.run([sys.executable, "-c", _SIDE_EFFECTS, package], capture_output=True, text=True,
                               timeout=120, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        changed = json.loads(out.stdout.strip().splitlines()[-1])
        assert not changed, (
            f"importing {package} and loading the plugin {entry.plugin!r} changed the process: "
            + "; ".join(f"{what}: {detail}" for what, detail in changed.items())
            + ". A plugin is loaded into every trainkit process, the user's included: it must leave global state "
              "alone (set warnings filters, logging, signal handlers or environment variables in the functions "
              "that run on the workers, scoped, e.g. warnings.catch_warnings() or BackendConfig.train_fn_context())")

    def test_framework_is_declared_with_a_lower_bound(self) -> None:
        """The plugin's distribution requires its framework (``FRAMEWORK`` in the entry point's
        module), unconditionally and with a lower bound (the oldest release the plugin supports)."""
        entry = _entry_for(type(self.backend_config))
        dist, framework = _plugin_distribution(entry)
        if framework is None or _normalize(framework) == _normalize(dist.metadata["Name"]):
            pytest.skip(f"the plugin {entry.plugin!r} names no framework distribution of its own (FRAMEWORK)")
        reqs = [r for r in _requirements(dist) if _normalize(r.name) == _normalize(framework)]
        name = f"{dist.metadata['Name']} {dist.version}"
        assert reqs, (f"{name} does not require its framework {framework!r} (FRAMEWORK), or only under an extra or "
                      f"a marker: declare it in [project] dependencies with the oldest release it supports, e.g. "
                      f"'{framework}>=X.Y'")
        assert any(spec.operator in (">=", ">", "~=", "==", "===") for r in reqs for spec in r.specifier), (
            f"{name} requires {', '.join(map(str, reqs))} without a lower bound: an old {framework} the plugin "
            f"never ran with would be accepted. Declare the oldest supported release, e.g. '{framework}>=X.Y'")

    def test_declared_requirements_resolve_on_this_platform(self) -> None:
        """Each requirement of the plugin's distribution (but trainkit's own) has a release on the
        package index pip is configured with, for this Python and platform, within its bounds
        (``pip index versions``; skipped when pip or the index cannot be reached)."""
        entry = _entry_for(type(self.backend_config))
        dist, _ = _plugin_distribution(entry)
        reqs = [r for r in _requirements(dist) if not _normalize(r.name).startswith("trainkit")]
        if not reqs:
            pytest.skip(f"{dist.metadata['Name']} declares no requirement to resolve (trainkit's own aside)")
        for req in reqs:
            versions = _index_versions(req.name)
            matching = [v for v in versions if req.specifier.contains(v, prereleases=True)]
            assert matching, (
                f"{dist.metadata['Name']} requires {req}, but the package index has "
                + (f"no release of {req.name} for this Python and platform" if not versions
                   else f"only {req.name} {', '.join(versions[:8])} here, none within {req.specifier}")
                + f" ({sys.platform}, Python {sys.version_info.major}.{sys.version_info.minor}): a user here could "
                  "not install the plugin. Depend on a distribution that exists for every platform you support, "
                  "or mark the requirement for the platforms it has (e.g. '; sys_platform == \"linux\"')")

    def test_trainkit_requirement_allows_the_next_bug_fix_release(self) -> None:
        """The plugin's distribution requires trainkit-core in a compatible range that holds the
        installed core and its next bug-fix release (read from metadata; no package index)."""
        entry = _entry_for(type(self.backend_config))
        dist, _ = _plugin_distribution(entry)
        problem = trainkit_requirement_problem(dist)
        assert problem is None, problem
