"""How the suites read a plugin's test class: its Trainer's own config keyword, a config marked to
be recognised downstream, recorded ``on_start`` calls, and once-per-class deprecation warnings."""

from __future__ import annotations

import copy
import inspect
import uuid
import warnings
from typing import Callable

from trainkit import BackendConfig

_STANDARD_CONFIGS = {"train_loop_config", "backend_config", "scaling_config", "run_config", "dataset_config",
                     "validation_config"}


def _config_keyword(trainer_cls: type) -> str | None:
    """The keyword a plugin's Trainer takes its own config by: its ``config_arg``, else the one
    ``*_config`` parameter of its ``__init__`` that is not a standard one (``paddle_config=``)."""
    if getattr(trainer_cls, "config_arg", None):
        return trainer_cls.config_arg
    try:
        parameters = inspect.signature(trainer_cls.__init__).parameters
    except (TypeError, ValueError):
        return None
    own = [name for name in parameters if name.endswith("_config") and name not in _STANDARD_CONFIGS]
    return own[0] if len(own) == 1 else None



_MARK = "_trainkit_conformance_mark"


def _marked(config: BackendConfig) -> tuple[BackendConfig, str]:
    """A copy of ``config`` that carries a mark of its own, and the mark."""
    marked, mark = copy.copy(config), uuid.uuid4().hex
    object.__setattr__(marked, _MARK, mark)  # frozen dataclasses too
    return marked, mark


def _record_on_start(backend_cls: type, monkeypatch) -> list[BackendConfig]:
    """The backend config every ``backend_cls.on_start`` is called with (in the driver), in order."""
    received, on_start = [], backend_cls.on_start

    def recorded_on_start(backend, worker_group, backend_config) -> None:
        received.append(backend_config)
        on_start(backend, worker_group, backend_config)

    monkeypatch.setattr(backend_cls, "on_start", recorded_on_start)
    return received



def _takes_seed(method: Callable) -> bool:
    """Whether a bound ``make_state`` takes a positional argument (the seed)."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):  # no signature to read: call it as documented
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)


_warned: set[tuple[type, str]] = set()


def _warn_once(cls: type, hook: str, message: str) -> None:
    """A ``DeprecationWarning`` about ``cls``'s override of ``hook``, once per class and process,
    pointing at the override's ``def`` line."""
    if (cls, hook) in _warned:
        return
    _warned.add((cls, hook))
    code = getattr(getattr(cls, hook), "__code__", None)
    if code is None:
        warnings.warn(message, DeprecationWarning, stacklevel=3)
    else:
        warnings.warn_explicit(message, DeprecationWarning, code.co_filename, code.co_firstlineno,
                               module=cls.__module__)


class NOT_PROVIDED:  # noqa: N801 - reads as a constant where a hook is set: ``shard = NOT_PROVIDED("why")``
    """An explicit opt-out of a conformance hook, for a plugin that truly has no such helper::

        class TestXGBoostBackend(BackendConformance):
            shard = NOT_PROVIDED("xgboost takes a DMatrix per rank; the plugin has no data helper")

    The probes that need the hook then skip, and the pytest summary lists every opt-out with its
    reason. A hook left unset (None) fails its probe with the line to add."""

    def __init__(self, why: str) -> None:
        if not isinstance(why, str) or not why.strip():
            raise ValueError(f"NOT_PROVIDED(why): why={why!r} must say why the plugin has no such helper, "
                             "e.g. NOT_PROVIDED('the framework has no data loader of its own')")
        self.why = why

    def __repr__(self) -> str:
        return f"NOT_PROVIDED({self.why!r})"


#: (suite class qualname, hook, why) of every opt-out a probe met in this process; trainkit.testing's
#: pytest_terminal_summary lists them
OPT_OUTS: list[tuple[str, str, str]] = []

#: what each hook is, as the line an author adds to the test class
HOOK_LINES = {
    "shard": "shard = staticmethod(lambda rows: <the rows of `rows` this rank gets through your data helper "
             "(sampler, loader), in the training function>)",
    "report_callback": "report_callback = staticmethod(lambda metrics: <report `metrics` through your report "
                       "callback, as the framework calls it on every rank at a step's end>)",
    "resume": "resume = staticmethod(lambda checkpoint: <the state your resume helper restores from `checkpoint`>)",
    "journey": "journey = staticmethod(lambda config: <one small training run through your plugin's helpers: "
               "model and optimizer seeded by config['seed'], resumed from trainkit.get_checkpoint(), config['rows'] split by "
               "your data helper, config['steps'] steps each reporting {'step': n, 'loss': x} with a checkpoint; "
               "docs/extending.md, 'The journey'>)",
}


def required_hook(suite_cls: type, name: str) -> Callable:
    """The hook ``name`` of a plugin's test class. Not set (None): the probe fails with the line to
    add. Set to ``NOT_PROVIDED(why)``: the probe skips and the opt-out goes to the summary."""
    import pytest

    value = getattr(suite_cls, name, None)
    if isinstance(value, NOT_PROVIDED):
        OPT_OUTS.append((suite_cls.__qualname__, name, value.why))
        pytest.skip(f"opted out: {suite_cls.__qualname__}.{name} = {value!r}")
    if value is None:
        pytest.fail(f"{suite_cls.__qualname__} sets no `{name}`, which this probe needs. Add to the class:\n"
                    f"    {HOOK_LINES[name]}\n"
                    f"or, if the plugin truly has no such helper, opt out with the reason:\n"
                    f"    {name} = NOT_PROVIDED(\"why\")   (from trainkit.testing import NOT_PROVIDED)",
                    pytrace=False)
    if not callable(value):
        pytest.fail(f"{suite_cls.__qualname__}.{name} = {value!r} is not callable: {HOOK_LINES[name]}", pytrace=False)
    return value


def given_hook(suite_cls: type, name: str) -> Callable | None:
    """The hook where the class gives one, else None (for a probe that checks it on the way, such as
    ``shard`` in the two-node run; the probe of its own fails or lists the opt-out)."""
    value = getattr(suite_cls, name, None)
    return value if callable(value) and not isinstance(value, NOT_PROVIDED) else None
