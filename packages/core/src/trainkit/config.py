"""Run configuration: how many workers, where results go, how failures and checkpoints are handled.

Every config validates at construction: a bad value raises ``ValueError`` naming the field, the
value and what is allowed, before anything starts.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

from trainkit._internal.cluster import tpu
from trainkit._internal.interface import field_label
from trainkit._internal.naming import validate_name
from trainkit.callbacks import UserCallback

__all__ = ["ScalingConfig", "RunConfig", "FailureConfig", "CheckpointConfig", "LoggingConfig", "SyncConfig"]

_PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
_MAX_WORKERS = 100_000


def _bad(field_name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{field_label(field_name)}={value!r} is invalid: expected {allowed}")


def _check_int(field_name: str, value: Any, *, minimum: int, maximum: int | None = None) -> int:
    """An int (not a bool, float or string) within [minimum, maximum]."""
    allowed = f"an int >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(field_name, value, allowed)
    if value < minimum or (maximum is not None and value > maximum):
        raise _bad(field_name, value, allowed)
    return value


def _check_number(field_name: str, value: Any, *, minimum: float, allow_equal: bool = True) -> float:
    op = ">=" if allow_equal else ">"
    allowed = f"a finite number {op} {minimum}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(field_name, value, allowed)
    if value < minimum or (not allow_equal and value == minimum):
        raise _bad(field_name, value, allowed)
    return float(value)


def _check_bool(field_name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _bad(field_name, value, "True or False")
    return value


@dataclass(frozen=True)
class ScalingConfig:
    """How many workers to run and what each one reserves.

    Example::

        ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5})
        ScalingConfig(num_workers=0)            # local mode: run in this process
        ScalingConfig(num_workers=(2, 8))       # elastic: at least 2, at most 8
        ScalingConfig(num_workers=4, use_tpu=True, topology="4x4", accelerator_type="TPU-V6E")

    Attributes:
        num_workers: workers to start; ``0`` runs the function in the driver process
            (local mode); ``(min, max)`` is elastic.
        use_gpu: reserve one GPU per worker (unless ``resources_per_worker`` says otherwise).
        resources_per_worker: Ray resources per worker; defaults to ``{"CPU": 1}`` (+ ``"GPU": 1``;
            + ``"TPU"``: the chips of one host of the slice, or 1 without a ``topology``).
        placement_strategy: Ray placement-group strategy: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD.
        accelerator_type: Ray accelerator type every worker must run on (e.g. ``"A100"``,
            ``"TPU-V6E"``).
        use_tpu: one TPU host per worker. With more than one worker, ``topology`` and
            ``accelerator_type`` are required: workers then fill whole slices (``num_workers`` a
            multiple of the workers per slice), each slice placed atomically, ranks in slice order.
        topology: the chips of one TPU slice per dimension (e.g. ``"4x4"``, ``"2x2x2"``).
        label_selector: node labels every worker must match.
        elastic_resize_monitor_interval_s: how often an elastic run checks for room to grow.
    """

    num_workers: int | tuple[int, int] = 1
    use_gpu: bool = False
    resources_per_worker: Mapping[str, float] | None = None
    placement_strategy: str = "PACK"
    accelerator_type: str | None = None
    use_tpu: bool = False
    topology: str | None = None
    label_selector: Mapping[str, str] | None = None
    elastic_resize_monitor_interval_s: float = 60.0

    def __post_init__(self) -> None:
        n = self.num_workers
        if isinstance(n, (tuple, list)):
            if len(n) != 2:
                raise _bad("num_workers", n, "an int >= 0 or a (min, max) pair of ints >= 1")
            lo = _check_int("num_workers[0] (min)", n[0], minimum=1, maximum=_MAX_WORKERS)
            hi = _check_int("num_workers[1] (max)", n[1], minimum=1, maximum=_MAX_WORKERS)
            if lo > hi:
                raise _bad("num_workers", n, "(min, max) with min <= max")
            object.__setattr__(self, "num_workers", (lo, hi))
        else:
            _check_int("num_workers", n, minimum=0, maximum=_MAX_WORKERS)
        _check_bool("use_gpu", self.use_gpu)
        _check_bool("use_tpu", self.use_tpu)
        if self.resources_per_worker is not None:
            if not isinstance(self.resources_per_worker, Mapping):
                raise _bad("resources_per_worker", self.resources_per_worker, 'a dict like {"CPU": 1}')
            for name, amount in self.resources_per_worker.items():
                if not isinstance(name, str) or not name:
                    raise _bad("resources_per_worker", self.resources_per_worker, "non-empty string keys")
                _check_number(f"resources_per_worker[{name!r}]", amount, minimum=0)
            object.__setattr__(self, "resources_per_worker", dict(self.resources_per_worker))
        if self.placement_strategy not in _PLACEMENT_STRATEGIES:
            raise _bad("placement_strategy", self.placement_strategy, f"one of {', '.join(_PLACEMENT_STRATEGIES)}")
        for name in ("accelerator_type", "topology"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise _bad(name, value, "None or a non-empty string")
        self._check_tpu()
        if self.label_selector is not None and not (
            isinstance(self.label_selector, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in self.label_selector.items())
        ):
            raise _bad("label_selector", self.label_selector, "a dict of str to str")
        _check_number("elastic_resize_monitor_interval_s", self.elastic_resize_monitor_interval_s,
                      minimum=0, allow_equal=False)

    def _check_tpu(self) -> None:
        tpus = (self.resources_per_worker or {}).get("TPU", 0)
        if not self.use_tpu:
            if tpus or self.topology:
                raise _bad("use_tpu", False, 'True when resources_per_worker has "TPU" or a topology is set')
            return
        if self.use_gpu:
            raise _bad("use_tpu", True, "not together with use_gpu=True")
        if self.elastic:
            raise _bad("num_workers", self.num_workers, "a fixed number of workers with use_tpu=True "
                       "(elastic TPU runs are not supported)")
        if self.resources_per_worker is not None and not tpus:
            raise _bad("resources_per_worker", self.resources_per_worker, 'a "TPU" amount > 0 when use_tpu=True')
        shape = self.tpu_slice
        if shape is None:
            if self.max_workers > 1:
                raise _bad("topology", self.topology, "a TPU topology (e.g. '4x4') and an accelerator_type "
                           "(e.g. 'TPU-V6E') when use_tpu=True and num_workers > 1: workers fill whole slices")
            return
        per_worker = self.worker_resources["TPU"]
        if shape.chips % per_worker:
            raise _bad('resources_per_worker["TPU"]', per_worker,
                       f"a divisor of the {shape.chips} chips of a {self.topology} slice")
        if self.max_workers % self.workers_per_slice:
            raise _bad("num_workers", self.num_workers, f"a multiple of {self.workers_per_slice}, the workers of "
                       f"one {self.topology} {self.accelerator_type} slice: slices are used whole")

    @property
    def tpu_slice(self) -> tpu.SliceShape | None:
        """The shape of one TPU slice, when ``use_tpu`` with a ``topology`` and ``accelerator_type``."""
        if not (self.use_tpu and self.topology and self.accelerator_type):
            return None
        return tpu.slice_shape(self.accelerator_type, self.topology)

    @property
    def workers_per_slice(self) -> int:
        """Workers that fill one TPU slice (1 without a slice)."""
        shape = self.tpu_slice
        return int(shape.chips // self.worker_resources["TPU"]) if shape else 1

    @property
    def local_mode(self) -> bool:
        """True when the train function runs in the driver process (``num_workers=0``)."""
        return self.num_workers == 0

    @property
    def elastic(self) -> bool:
        return isinstance(self.num_workers, tuple)

    @property
    def min_workers(self) -> int:
        return self.num_workers[0] if isinstance(self.num_workers, tuple) else self.num_workers

    @property
    def max_workers(self) -> int:
        return self.num_workers[1] if isinstance(self.num_workers, tuple) else self.num_workers

    @property
    def worker_resources(self) -> dict[str, float]:
        """Ray resources reserved by one worker."""
        if self.resources_per_worker is not None:
            resources = dict(self.resources_per_worker)
        else:
            resources = {"CPU": 1.0}
            if self.use_gpu:
                resources["GPU"] = 1.0
            if self.use_tpu:
                shape = self.tpu_slice
                resources["TPU"] = float(shape.chips_per_host if shape else 1)
        if self.use_gpu and not resources.get("GPU"):
            raise _bad("resources_per_worker", self.resources_per_worker,
                       'a "GPU" amount > 0 when use_gpu=True')
        if self.accelerator_type:
            resources[f"accelerator_type:{self.accelerator_type}"] = 0.001
        return {k: float(v) for k, v in resources.items() if v}


@dataclass(frozen=True)
class FailureConfig:
    """What to do when a worker dies or raises.

    Attributes:
        max_failures: how many times the whole worker group is restarted from the last committed
            checkpoint before the run fails; ``0`` (default) fails on the first error, ``-1`` retries
            forever.
        worker_timeout_s: a worker that does not answer the driver's heartbeat for this long (a
            frozen or partitioned process) fails the attempt with an error naming its rank.
        progress_timeout_s: a rank that makes no progress for this long (no ``report()`` and no
            ``trainkit.collective`` call, counted from its last one or from the start of the
            training function) while its process still answers (a deadlock, an endless loop, a
            hung read) fails the attempt with an error naming it and its training thread's stack.
            ``None`` turns it off. The default, an hour, is meant never to trip a real job: lower
            it to catch hangs sooner, raise it when a rank can go longer between reports (e.g.
            one report per epoch of more than an hour).
        max_preemption_failures: how many preemptions (a node drained, a worker SIGTERM'd: see
            ``trainkit.get_preemption_info``) the run restarts from, counted apart from
            ``max_failures``; ``-1`` (default, as Ray Train) retries forever, ``0`` fails on the first.
        relax_collectives_on_preemption: once a preemption is known, a report commits when every rank
            that is not preempted has made it, so the survivors' just-in-time checkpoint commits even
            if a preempted rank is gone first. No effect when rank 0 is preempted (its metrics are
            the report's). Default False.
        preemption_grace_s: how long the ranks may keep running past the preemption deadline before
            the driver stops them and restarts (default 0: at the deadline).
    """

    max_failures: int = 0
    worker_timeout_s: float = 60.0
    progress_timeout_s: float | None = 3600.0
    max_preemption_failures: int = -1
    relax_collectives_on_preemption: bool = False
    preemption_grace_s: float = 0.0

    def __post_init__(self) -> None:
        _check_int("max_failures", self.max_failures, minimum=-1)
        _check_number("worker_timeout_s", self.worker_timeout_s, minimum=0, allow_equal=False)
        if self.progress_timeout_s is not None:
            try:
                _check_number("progress_timeout_s", self.progress_timeout_s, minimum=0, allow_equal=False)
            except ValueError:
                raise _bad("progress_timeout_s", self.progress_timeout_s,
                           "None (off) or a finite number of seconds > 0") from None
        _check_int("max_preemption_failures", self.max_preemption_failures, minimum=-1)
        _check_bool("relax_collectives_on_preemption", self.relax_collectives_on_preemption)
        _check_number("preemption_grace_s", self.preemption_grace_s, minimum=0)


@dataclass(frozen=True)
class CheckpointConfig:
    """Which checkpoints to keep.

    Attributes:
        num_to_keep: keep this many committed checkpoints (None keeps all); the latest is always kept.
        checkpoint_score_attribute: metric ranking checkpoints for retention and ``best_checkpoints``;
            None ranks by recency.
        checkpoint_score_order: ``"max"`` or ``"min"``.
    """

    num_to_keep: int | None = None
    checkpoint_score_attribute: str | None = None
    checkpoint_score_order: Literal["max", "min"] = "max"

    def __post_init__(self) -> None:
        if self.num_to_keep is not None:
            _check_int("num_to_keep", self.num_to_keep, minimum=1)
        if self.checkpoint_score_attribute is not None and (
            not isinstance(self.checkpoint_score_attribute, str) or not self.checkpoint_score_attribute
        ):
            raise _bad("checkpoint_score_attribute", self.checkpoint_score_attribute, "None or a metric name")
        if self.checkpoint_score_order not in ("max", "min"):
            raise _bad("checkpoint_score_order", self.checkpoint_score_order, '"max" or "min"')


@dataclass(frozen=True)
class LoggingConfig:
    """The level of trainkit's own log records (the ``trainkit`` logger) in the driver.

    Example::

        RunConfig(logging_config=LoggingConfig(log_level="DEBUG"))
    """

    log_level: str = "INFO"

    def __post_init__(self) -> None:
        levels = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
        if not isinstance(self.log_level, str) or self.log_level.upper() not in levels:
            raise _bad("log_level", self.log_level, f"one of {', '.join(levels)}")
        object.__setattr__(self, "log_level", self.log_level.upper())


@dataclass(frozen=True)
class SyncConfig:
    """Accepted for Ray Train scripts and ignored: trainkit writes checkpoints and results straight
    to ``storage_path``, so there is nothing to sync afterwards."""

    sync_period: int = 300
    sync_timeout: int = 1800
    sync_artifacts: bool = False
    sync_artifacts_on_checkpoint: bool = True


_VERBOSITY = (0, 1, 2)


_RUNTIME_ENV_FIELDS = {
    "env_vars": "a dict of str to str",
    "working_dir": "a local directory or a URI (s3://, gs://, https://... of a .zip)",
    "excludes": "a list of str (paths or patterns of working_dir to leave out)",
    "pip": ("a list of requirement strings, a requirements.txt path, or a dict with 'packages' "
            "(that list or path) and optionally 'pip_check' (bool) and 'pip_version' (str)"),
}


def _check_runtime_env(env: Any) -> dict[str, Any] | None:
    """``RunConfig.worker_runtime_env``, checked field by field: a plain dict, or None."""
    label = "worker_runtime_env"
    if env is None:
        return None
    if not isinstance(env, Mapping):
        raise _bad(label, env, "None or a dict (a Ray runtime_env) with keys " + ", ".join(_RUNTIME_ENV_FIELDS))
    env = dict(env)
    unknown = sorted(str(k) for k in env if k not in _RUNTIME_ENV_FIELDS)
    if unknown:
        raise ValueError(f"{field_label(label)} has unsupported key(s) {', '.join(map(repr, unknown))}: "
                         f"trainkit supports {', '.join(map(repr, _RUNTIME_ENV_FIELDS))}")

    def bad(key: str, allowed: str | None = None) -> ValueError:
        return _bad(f"{label}[{key!r}]", env[key], allowed or _RUNTIME_ENV_FIELDS[key])

    def str_list(value: Any) -> bool:
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value)

    if "env_vars" in env:
        env_vars = env["env_vars"]
        if not isinstance(env_vars, Mapping) or not all(
                isinstance(k, str) and k and "=" not in k and isinstance(v, str) for k, v in env_vars.items()):
            raise bad("env_vars")
        env["env_vars"] = dict(env_vars)
    if "working_dir" in env:
        if hasattr(env["working_dir"], "__fspath__"):
            env["working_dir"] = os.fspath(env["working_dir"])
        working_dir = env["working_dir"]
        if not isinstance(working_dir, str) or not working_dir:
            raise bad("working_dir")
        if "://" not in working_dir:
            if not os.path.isdir(working_dir):
                raise bad("working_dir", "an existing local directory or a URI (no such directory)")
            env["working_dir"] = os.path.abspath(working_dir)  # the directory of now, wherever the driver moves
    if "excludes" in env:
        if not str_list(env["excludes"]):
            raise bad("excludes")
        env["excludes"] = list(env["excludes"])
    if "pip" in env:
        pip = env["pip"]
        if isinstance(pip, Mapping):
            packages = pip.get("packages")
            if set(pip) - {"packages", "pip_check", "pip_version"} \
                    or not (str_list(packages) or (isinstance(packages, str) and packages)) \
                    or not isinstance(pip.get("pip_check", False), bool) \
                    or not isinstance(pip.get("pip_version", ""), str):
                raise bad("pip")
            env["pip"] = dict(pip)
        elif isinstance(pip, str):
            if not os.path.isfile(pip):
                raise bad("pip", "a list of requirement strings, or the path of a requirements.txt that exists")
            env["pip"] = os.path.abspath(pip)
        elif str_list(pip):
            env["pip"] = list(pip)
        else:
            raise bad("pip")
    return env


@dataclass(frozen=True)
class RunConfig:
    """Where a run lives and how it behaves.

    Example::

        RunConfig(name="digits", storage_path="s3://bucket/runs",
                  checkpoint_config=CheckpointConfig(num_to_keep=2))

    Attributes:
        name: run name, the directory under ``storage_path``; letters, digits, ``.``, ``_``, ``-``,
            ``=``, ``,`` (Tune's ``train-trial_id=abc``). Re-running with the same name resumes the run.
        storage_path: local path or URI (``s3://``, ``gs://``, ...); default ``~/trainkit_results``
            (or ``$TRAINKIT_STORAGE_PATH``).
        storage_filesystem: a ``pyarrow.fs.FileSystem`` to use for ``storage_path``.
        failure_config, checkpoint_config: see those classes.
        callbacks: ``trainkit.UserCallback`` objects called in the driver.
        verbose: 0 quiet, 1 progress line and summary (default; ``$TRAINKIT_VERBOSE``), 2 also every report.
        logging_config: a ``LoggingConfig`` (level of trainkit's log records).
        sync_config: a ``SyncConfig``, accepted and ignored (nothing to sync).
        worker_runtime_env: a Ray ``runtime_env`` for the worker processes (Ray Train V2's
            argument): ``env_vars`` (dict of str to str), ``working_dir`` (a local directory, uploaded
            once per fit, or a URI; the workers start in it and import from it), ``excludes`` (of
            ``working_dir``) and ``pip`` (a list of requirements, a requirements.txt path, or
            ``{"packages": [...], "pip_check": bool, "pip_version": str}``). Needs Ray workers
            (``num_workers >= 1``).
    """

    name: str | None = None
    storage_path: str | None = None
    storage_filesystem: Any = None
    failure_config: FailureConfig = field(default_factory=FailureConfig)
    checkpoint_config: CheckpointConfig = field(default_factory=CheckpointConfig)
    callbacks: Sequence[Any] = ()
    verbose: int | None = None
    logging_config: LoggingConfig = field(default_factory=LoggingConfig)
    sync_config: SyncConfig | None = None
    worker_runtime_env: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker_runtime_env", _check_runtime_env(self.worker_runtime_env))
        if self.name is not None:
            validate_name(field_label("name"), self.name)
        if self.storage_path is not None and (not isinstance(self.storage_path, str) or not self.storage_path):
            if hasattr(self.storage_path, "__fspath__"):
                object.__setattr__(self, "storage_path", str(self.storage_path))
            else:
                raise _bad("storage_path", self.storage_path, "a local path or URI string")
        if "\0" in (self.storage_path or ""):
            raise _bad("storage_path", self.storage_path, "a path without NUL bytes")
        if self.failure_config is None:
            object.__setattr__(self, "failure_config", FailureConfig())
        if self.checkpoint_config is None:
            object.__setattr__(self, "checkpoint_config", CheckpointConfig())
        if not isinstance(self.failure_config, FailureConfig):
            raise _bad("failure_config", self.failure_config, "a trainkit.FailureConfig")
        if not isinstance(self.checkpoint_config, CheckpointConfig):
            raise _bad("checkpoint_config", self.checkpoint_config, "a trainkit.CheckpointConfig")
        object.__setattr__(self, "callbacks", tuple(self.callbacks or ()))
        for callback in self.callbacks:
            if not isinstance(callback, UserCallback):
                raise _bad("callbacks", callback, "trainkit.UserCallback objects (subclass it)")
        if self.verbose is not None and (isinstance(self.verbose, bool) or self.verbose not in _VERBOSITY):
            raise _bad("verbose", self.verbose, "0, 1 or 2")
        if self.logging_config is None:
            object.__setattr__(self, "logging_config", LoggingConfig())
        if not isinstance(self.logging_config, LoggingConfig):
            raise _bad("logging_config", self.logging_config, "a trainkit.LoggingConfig")
        if self.sync_config is not None and not isinstance(self.sync_config, SyncConfig):
            raise _bad("sync_config", self.sync_config, "None or a trainkit.SyncConfig")

    def __repr__(self) -> str:
        from trainkit._internal.redact import redact

        fields = ", ".join(f"{name}={redact(repr(getattr(self, name)))}" for name in self.__dataclass_fields__)
        return f"RunConfig({fields})"
