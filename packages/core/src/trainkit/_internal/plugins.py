"""Plugin discovery (entry-point groups ``trainkit.plugins``, the frameworks', and
``trainkit.runtimes``, e.g. trainkit-warm: ``hookspecs.py``) and the backend registry.

Environment:
    TRAINKIT_PLUGINS                  comma-separated allow list (only these load)
    TRAINKIT_DISABLED_PLUGINS         comma-separated deny list
    TRAINKIT_DISABLE_PLUGIN_AUTOLOAD  "1": load no entry point except those in TRAINKIT_PLUGINS

A plugin whose framework is missing or outside the version range its distribution declares is
skipped with a reason; one that fails to import or register is logged and skipped. Neither
affects the other plugins. A plugin registers the backend its entry point names (or names under it,
``<entry>_<variant>``); two plugins claiming one name are both errors, and that backend refuses to
pick one: which plugin wins is never decided by load order.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata as md
import logging
import os
import threading
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pluggy
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from trainkit import hookspecs
from trainkit.backend import BackendConfig
from trainkit.errors import UnknownBackendError

logger = logging.getLogger("trainkit.plugins")
GROUP = "trainkit.plugins"
RUNTIMES = "trainkit.runtimes"  # runtime plugins: loaded as framework ones, registering no backend


DIRECT = "<direct>"  # registrations made outside any plugin (tests, scripts)


# Hooks no first-party plugin used, removed before 0.1: what a plugin does instead.
_CALLBACK = "have the user pass a trainkit.UserCallback in RunConfig(callbacks=[...])"
_WORKER = "act on the workers from your Backend's on_start / on_shutdown (worker_group.execute)"
REMOVED_HOOKS = {"trainkit_after_report": _CALLBACK, "trainkit_on_failure": _CALLBACK,
                 "trainkit_default_callbacks": _CALLBACK, "trainkit_worker_start": _WORKER,
                 "trainkit_worker_stop": _WORKER}


def owns(entry_name: str, backend: str) -> bool:
    """Whether the plugin of entry point ``entry_name`` may register ``backend``."""
    return backend == entry_name or backend.startswith(f"{entry_name}_")


@dataclass
class PluginInfo:
    name: str
    distribution: str | None = None
    version: str | None = None
    framework: str | None = None
    framework_version: str | None = None
    status: str = "loaded"  # loaded | disabled | skipped | error
    reason: str = ""


@dataclass(frozen=True)
class BackendEntry:
    name: str
    config_cls: type
    trainer_cls: type | None
    plugin: str


@dataclass
class BackendRegistry:
    """Backends by name. Plugins call ``register`` from ``trainkit_register_backends``."""

    entries: dict[str, BackendEntry] = field(default_factory=dict)
    plugin: str = DIRECT  # the entry point of the plugin registering now
    clash: tuple[str, str] | None = None  # (backend, the plugin that has it) when ``plugin`` claimed it too

    def register(self, name: str, config_cls: type, trainer_cls: type | None = None) -> None:
        if self.plugin != DIRECT and not owns(self.plugin, name):
            raise ValueError(f"it registers backend {name!r}, but a plugin registers only the backend its entry "
                             f"point names ({self.plugin!r}) or names starting with '{self.plugin}_'")
        if name in self.entries:
            self.clash = (name, self.entries[name].plugin)
            raise ValueError(f"backend {name!r} is already registered by plugin {self.clash[1]!r}")
        self.entries[name] = BackendEntry(name, config_cls, trainer_cls, self.plugin)
        if isinstance(config_cls, type) and issubclass(config_cls, BackendConfig):
            config_cls._registered_name = name  # its BackendConfig.name, shown in progress and run state


class Plugins:
    """The loaded plugins: a pluggy manager, their statuses and the backends they registered."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager("trainkit")
        self.manager.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}
        self.backends = BackendRegistry()
        self.clashes: dict[str, list[PluginInfo]] = {}  # backend name -> the plugins that all claim it

    @property
    def hook(self) -> Any:
        return self.manager.hook

    def add(self, module: ModuleType | object, info: PluginInfo) -> None:
        """Register one plugin object and its backends; a broken plugin is recorded, not raised."""
        self.infos[info.name] = info
        try:
            for hook, instead in REMOVED_HOOKS.items():
                if hasattr(module, hook):
                    raise ValueError(f"it implements {hook}, which trainkit 0.1 removed: {instead}")
            self.manager.register(module, name=info.name)
            self.manager.check_pending()
        except Exception as exc:  # noqa: BLE001 - any broken plugin is isolated
            if self.manager.is_registered(module):
                self.manager.unregister(module)
            self._fail(info, exc)
            return
        before = dict(self.backends.entries)
        self.backends.plugin = info.name
        try:
            others = [p for p in self.manager.get_plugins() if p is not module]
            self.manager.subset_hook_caller("trainkit_register_backends", others)(registry=self.backends)
        except Exception as exc:  # noqa: BLE001
            clash, self.backends.clash = self.backends.clash, None
            self.manager.unregister(module)
            if clash and clash[1] in self.infos:  # both are errors: neither wins by having loaded first
                self.backends.entries = {n: e for n, e in before.items() if e.plugin != clash[1]}
                self.manager.unregister(name=clash[1])
                self.clash(clash[0], [self.infos[clash[1]], info])
            else:
                self.backends.entries = before
                self._fail(info, exc)
        finally:
            self.backends.plugin = DIRECT

    def clash(self, backend: str, infos: list[PluginInfo]) -> None:
        """Every plugin in ``infos`` claims ``backend``: each becomes an error naming the others."""
        self.clashes[backend] = infos
        for info in infos:
            others = ", ".join(_label(i) for i in infos if i is not info)
            info.status, info.reason = "error", f"backend {backend!r} is also registered by {others}"
            logger.warning("trainkit plugin %r failed and was skipped: %s", info.name, info.reason)

    @staticmethod
    def _fail(info: PluginInfo, exc: BaseException) -> None:
        info.status, info.reason = "error", f"{type(exc).__name__}: {exc}"
        logger.warning("trainkit plugin %r failed and was skipped: %s", info.name, info.reason, exc_info=exc)

    def not_loaded(self) -> str:
        """Why each plugin that is not disabled did not load, e.g. "Plugin trainkit-foo (entry point
        'foo') skipped: foo is not installed"; "" when all of them loaded."""
        return " ".join(f"Plugin {_label(i)} {i.status}: {i.reason}."
                        for i in self.infos.values() if i.status in ("skipped", "error"))

    def backend(self, name: str) -> BackendEntry:
        if name in self.clashes:
            claimants = " and ".join(_label(i) for i in self.clashes[name])
            raise UnknownBackendError(f"Backend {name!r} is registered by more than one plugin: {claimants}. trainkit "
                                      "will not guess which one to run: uninstall all but one of them.")
        if name in self.backends.entries:
            return self.backends.entries[name]
        installed = ", ".join(sorted(self.backends.entries)) or "none"
        message = f"Unknown backend {name!r}. Installed backends: {installed}."
        info = self.infos.get(name)
        nearest = difflib.get_close_matches(name, self.backends.entries, n=1)
        if info is not None and info.status != "loaded":
            message += f" Plugin {name!r} is installed but {info.status}: {info.reason}"
        elif nearest:
            message += f" Did you mean {nearest[0]!r}?"
        elif name in first_party_plugins():
            message += f" To add it: {install_hint(first_party_plugins()[name])}"
        if info is None and (problems := self.not_loaded()):
            message += f" {problems}"  # the backend may be one of theirs (an entry name need not match it)
        raise UnknownBackendError(message)


def _label(info: PluginInfo) -> str:
    return f"{info.distribution or info.name} (entry point {info.name!r})"


def install_hint(distribution: str) -> str:
    """How to install one of this repository's distributions (not published yet: from a clone)."""
    folder = distribution.removeprefix("trainkit-")
    return (f"pip install {distribution} once it is published; until then, in a clone of the trainkit "
            f"repository: pip install -e packages/core -e packages/{folder}")


def first_party_plugins() -> dict[str, str]:
    """Backend name -> distribution of the plugins core's extras name (``trainkit-core[torch]``):
    the only packages an install hint may name."""
    try:
        lines = md.requires("trainkit-core") or []
    except md.PackageNotFoundError:
        return {}
    names = {canonicalize_name(Requirement(line).name) for line in lines if "extra" in line}
    return {n.removeprefix("trainkit-"): n for n in sorted(names) if n.startswith("trainkit-")}


def _env_list(var: str) -> set[str]:
    return {item.strip() for item in os.environ.get(var, "").split(",") if item.strip()}


def _framework_problem(module: ModuleType, dist: md.Distribution | None, info: PluginInfo) -> str | None:
    """Why the plugin's framework can't be used, or None. The bound comes from the dist's metadata."""
    framework = getattr(module, "FRAMEWORK", None)
    if framework is None:
        return None
    info.framework = framework
    try:
        info.framework_version = md.version(framework)
    except md.PackageNotFoundError:
        return f"{framework} is not installed (pip install {info.distribution or 'the plugin'} installs it)"
    for line in (dist.requires or []) if dist else []:
        req = Requirement(line)
        if canonicalize_name(req.name) == canonicalize_name(framework) and req.marker is None:
            if req.specifier and not req.specifier.contains(info.framework_version, prereleases=True):
                return f"{framework} {info.framework_version} is outside the supported range {req.specifier}"
    return None


def _info(ep: md.EntryPoint) -> PluginInfo:
    dist = getattr(ep, "dist", None)
    return PluginInfo(ep.name, dist.name if dist else None, dist.version if dist else None)


def load_plugins() -> Plugins:
    """Discover and register every allowed plugin from entry points."""
    plugins = Plugins()
    allow, deny = _env_list("TRAINKIT_PLUGINS"), _env_list("TRAINKIT_DISABLED_PLUGINS")
    autoload = os.environ.get("TRAINKIT_DISABLE_PLUGIN_AUTOLOAD", "").lower() not in ("1", "true", "yes")
    def disabled(name: str) -> str | None:
        return ("listed in TRAINKIT_DISABLED_PLUGINS" if name in deny
                else "not listed in TRAINKIT_PLUGINS" if allow and name not in allow
                else "TRAINKIT_DISABLE_PLUGIN_AUTOLOAD is set" if not autoload and name not in allow
                else None)

    points = sorted([*md.entry_points(group=GROUP), *md.entry_points(group=RUNTIMES)], key=lambda e: e.name)
    names = [ep.name for ep in points]
    for name in sorted({n for n in names if names.count(n) > 1 and not disabled(n)}):
        infos = [_info(ep) for ep in points if ep.name == name]  # one entry name from two distributions
        for info in infos:
            plugins.infos[f"{name} ({info.distribution})"] = info
        plugins.clash(name, infos)
    for ep in points:
        if ep.name in plugins.clashes:
            continue
        info = _info(ep)
        if reason := disabled(ep.name):
            info.status, info.reason = "disabled", reason
            plugins.infos[ep.name] = info
            continue
        try:
            module = importlib.import_module(ep.value.split(":")[0])
        except Exception as exc:  # noqa: BLE001
            plugins.infos[ep.name] = info
            Plugins._fail(info, exc)
            continue
        problem = _framework_problem(module, getattr(ep, "dist", None), info)
        if problem:
            info.status, info.reason = "skipped", problem
            plugins.infos[ep.name] = info
            logger.debug("trainkit plugin %r skipped: %s", ep.name, problem)
            continue
        plugins.add(module, info)
    return plugins


_plugins: Plugins | None = None
_lock = threading.Lock()


def get_plugins(reload: bool = False) -> Plugins:
    """The process-wide plugins, loaded on first use (never at import)."""
    global _plugins
    with _lock:
        if _plugins is None or reload:
            _plugins = load_plugins()
        return _plugins


def torch_backend() -> type[BackendConfig] | None:
    """The torch backend's config class, where trainkit-torch is installed and loads: what the warm
    cluster's fork server imports by default (``trainkit up --prewarm``), and how its forks follow
    Ray's thread count."""
    entry = get_plugins().backends.entries.get("torch")
    return entry.config_cls if entry is not None else None
