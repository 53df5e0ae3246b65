"""``DataParallelTrainer`` runs a training function on every worker; ``Trainer`` picks a backend by name."""

from __future__ import annotations

import functools
import inspect
import time
from typing import Any, Callable, ClassVar

from trainkit._internal.worker.ingest import Datasets
from trainkit.backend import BackendConfig
from trainkit.config import RunConfig, ScalingConfig
from trainkit.data import DataConfig
from trainkit.result import Result
from trainkit.validation import ValidationConfig

__all__ = ["DataParallelTrainer", "Trainer"]


_NOT_PICKLABLE = "Create locks, sockets, open files and clients inside the function instead of {}."


def _check_picklable(fn: Callable, config: dict | None) -> None:
    """Fail before any worker starts when the function or its config can't be shipped to workers."""
    from ray import cloudpickle

    try:
        cloudpickle.dumps(fn)
    except Exception as exc:  # noqa: BLE001 - any pickling failure gets the same explanation
        raise TypeError(f"train_loop_per_worker {getattr(fn, '__qualname__', fn)!r} cannot be sent to workers: "
                        f"{exc}. " + _NOT_PICKLABLE.format("capturing them")) from exc
    for key, value in (config or {}).items():
        try:
            cloudpickle.dumps(value)
        except Exception as exc:  # noqa: BLE001
            raise TypeError(f"train_loop_config[{key!r}] ({type(value).__name__}) cannot be sent to workers: "
                            f"{exc}. " + _NOT_PICKLABLE.format("passing them in the config")) from exc


class DataParallelTrainer:
    """Run ``train_loop_per_worker`` on ``scaling_config.num_workers`` workers.

    Example::

        def train_fn(config):
            for epoch in range(config["epochs"]):
                trainkit.report({"epoch": epoch})

        trainer = trainkit.DataParallelTrainer(
            train_fn, train_loop_config={"epochs": 3},
            scaling_config=trainkit.ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}))
        result = trainer.fit()

    A plugin's trainer names its config class and the keyword that takes it; the trainer then
    accepts that keyword (type-checked, default ``config_cls()``) as its ``backend_config``::

        class XGBoostTrainer(trainkit.DataParallelTrainer):
            config_cls = XGBoostConfig
            config_arg = "xgboost_config"      # XGBoostTrainer(fn, xgboost_config=XGBoostConfig(...))
    """

    #: The backend config class a plugin's subclass runs with, and its keyword argument.
    config_cls: ClassVar[type[BackendConfig] | None] = None
    config_arg: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "config_cls" in cls.__dict__ and "__init__" not in cls.__dict__:
            if not (isinstance(cls.config_cls, type) and issubclass(cls.config_cls, BackendConfig)):
                raise TypeError(f"{cls.__name__}.config_cls must be a trainkit.BackendConfig subclass, "
                                f"got {cls.config_cls!r}")
            if not (isinstance(cls.config_arg, str) and cls.config_arg.isidentifier()):
                raise TypeError(f"{cls.__name__}.config_arg must name its keyword argument, e.g. "
                                f"'{cls.config_cls.__name__.removesuffix('Config').lower()}_config', "
                                f"got {cls.config_arg!r}")
            cls.__init__ = _init_with_config(cls, cls.__init__)

    def __init__(
        self,
        train_loop_per_worker: Callable,
        *,
        train_loop_config: dict[str, Any] | None = None,
        backend_config: BackendConfig | None = None,
        scaling_config: ScalingConfig | None = None,
        run_config: RunConfig | None = None,
        datasets: dict[str, Any] | None = None,
        dataset_config: Any = None,
        validation_config: ValidationConfig | None = None,
    ):
        if not callable(train_loop_per_worker):
            raise TypeError(f"train_loop_per_worker must be callable, got {type(train_loop_per_worker).__name__}")
        if train_loop_config is not None and not isinstance(train_loop_config, dict):
            raise TypeError(f"train_loop_config must be a dict, got {type(train_loop_config).__name__}")
        for field_name, value, cls in (("scaling_config", scaling_config, ScalingConfig),
                                       ("run_config", run_config, RunConfig),
                                       ("backend_config", backend_config, BackendConfig)):
            if value is not None and not isinstance(value, cls):
                raise TypeError(f"{field_name} must be a trainkit.{cls.__name__}, got {type(value).__name__}")
        self._datasets = Datasets({} if datasets is None else datasets,
                                  DataConfig() if dataset_config is None else dataset_config)
        if validation_config is not None and not isinstance(validation_config, ValidationConfig):
            raise TypeError(f"validation_config must be a trainkit.ValidationConfig, got {type(validation_config).__name__}")
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = train_loop_config
        self.backend_config = backend_config or BackendConfig()
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        self.datasets = datasets
        self.validation_config = validation_config

    def fit(self) -> Result:
        """Run training to the end and return its ``Result``.

        Raises ``TrainingFailedError`` (also in ``Result.error``) when the run fails after its retries.
        """
        from trainkit._internal.plugins import get_plugins

        hook = get_plugins().hook
        hook.trainkit_check_inputs(train_loop_per_worker=self.train_loop_per_worker,
                                   train_loop_config=self.train_loop_config, datasets=self.datasets)
        local = self.scaling_config.local_mode
        run = dict(train_fn=self.train_loop_per_worker, train_loop_config=self.train_loop_config,
                   backend_config=self.backend_config, scaling_config=self.scaling_config,
                   run_config=self.run_config, datasets=self._datasets, validation_config=self.validation_config,
                   default_name=f"{type(self).__name__}_{time.strftime('%Y-%m-%d_%H-%M-%S')}")
        # a runtime plugin may run it elsewhere (trainkit-warm: its standby driver): Ray never imported here
        result = None if local else hook.trainkit_hand_off_fit(run=run)
        if result is None:
            from trainkit._internal.cluster.ray_runtime import fork_server_ahead
            from trainkit._internal.driver.controller import Controller, fork_server_of

            # an embedded cluster's workers fork from a server that imports the framework: it starts now
            with fork_server_ahead(None if local else fork_server_of(self.backend_config)[0],
                                   attaching=lambda: hook.trainkit_cluster_to_attach() is not None):
                if not local:
                    _check_picklable(self.train_loop_per_worker, self.train_loop_config)
                result = Controller(**run).run()
        if result.error is not None:
            raise result.error
        return result


def _init_with_config(cls: type[DataParallelTrainer], parent_init: Callable) -> Callable:
    """``cls.__init__``: its ``config_arg`` keyword becomes the ``backend_config``."""
    config_cls, arg = cls.config_cls, cls.config_arg
    name = config_cls.__name__  # "an XGBoostConfig", "an HFConfig", "a HorovodConfig"
    article = "an" if name[0] in "AEIOU" or (name[0] in "FHLMNRSX" and name[1:2].isupper()) else "a"

    @functools.wraps(parent_init)
    def __init__(self: DataParallelTrainer, train_loop_per_worker: Callable, **kwargs: Any) -> None:
        config = kwargs.pop(arg, None)
        if config is not None and not isinstance(config, config_cls):
            raise TypeError(f"{arg} must be {article} {name}, got {type(config).__name__}")
        if config is not None and kwargs.get("backend_config") is not None:
            raise TypeError(f"{cls.__name__} takes {arg} or backend_config, not both")
        kwargs.setdefault("backend_config", config or config_cls())
        parent_init(self, train_loop_per_worker, **kwargs)

    parameters = list(inspect.signature(parent_init).parameters.values())
    parameters.insert(2, inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=None,
                                           annotation=f"{config_cls.__name__} | None"))
    __init__.__signature__ = inspect.Signature(parameters)  # help() and editors show the keyword
    return __init__


class Trainer(DataParallelTrainer):
    """A trainer for any installed backend, by name.

    Example::

        trainer = trainkit.Trainer(train_fn, backend="torch",
                                   scaling_config=trainkit.ScalingConfig(num_workers=2))
    """

    def __init__(self, train_loop_per_worker: Callable, *, backend: str,
                 backend_config: BackendConfig | None = None, **kwargs: Any):
        from trainkit._internal.plugins import get_plugins

        entry = get_plugins().backend(backend)
        if backend_config is not None and not isinstance(backend_config, entry.config_cls):
            raise TypeError(f"backend_config for backend {backend!r} must be a {entry.config_cls.__name__}, "
                            f"got {type(backend_config).__name__}")
        super().__init__(train_loop_per_worker, backend_config=backend_config or entry.config_cls(), **kwargs)
