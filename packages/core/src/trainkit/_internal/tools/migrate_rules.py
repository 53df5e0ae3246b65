"""The Ray Train -> trainkit rules: ``trainkit migrate`` applies them and
docs/migrating-from-ray-train.md's rewrite table is generated from them (a test keeps the two equal)."""

from __future__ import annotations

# Ray module -> trainkit module. A dotted path is rewritten by its longest Ray module prefix here;
# Ray modules not listed (ray, ray.data, ray.tune, ...) stay Ray's.
MODULES: dict[str, str] = {
    "ray.train": "trainkit",
    "ray.train.context": "trainkit",
    "ray.train.data_parallel_trainer": "trainkit",
    "ray.train.error": "trainkit",
    "ray.train.v2": "trainkit",
    "ray.train.v2.api": "trainkit",
    "ray.train.v2.api.config": "trainkit",
    "ray.train.v2.api.context": "trainkit",
    "ray.train.v2.api.data_parallel_trainer": "trainkit",
    "ray.train.v2.api.exceptions": "trainkit",
    "ray.train.v2.api.report_config": "trainkit",
    "ray.train.v2.api.result": "trainkit",
    "ray.train.v2.api.train_fn_utils": "trainkit",
    "ray.train.v2.api.callback": "trainkit",
    "ray.train.v2.api.preemption": "trainkit",
    "ray.train.v2.api.reported_checkpoint": "trainkit",
    "ray.train.v2.api.validation_config": "trainkit",
    "ray.air": "trainkit",
    "ray.air.config": "trainkit",
    "ray.air.result": "trainkit",
    "ray.train.collective": "trainkit.collective",
    "ray.train.torch": "trainkit_torch",
    "ray.train.v2.torch": "trainkit_torch",
    "ray.train.v2.torch.torch_trainer": "trainkit_torch",
    "ray.train.lightning": "trainkit_lightning",
    "ray.train.v2.lightning": "trainkit_lightning",
    "ray.train.xgboost": "trainkit_xgboost",
    "ray.train.v2.xgboost": "trainkit_xgboost",
    "ray.train.v2.xgboost.xgboost_trainer": "trainkit_xgboost",
    "ray.train.lightgbm": "trainkit_lightgbm",
    "ray.train.v2.lightgbm": "trainkit_lightgbm",
    "ray.train.v2.lightgbm.lightgbm_trainer": "trainkit_lightgbm",
    "ray.train.huggingface": "trainkit_hf",
    "ray.train.huggingface.transformers": "trainkit_hf",
    "ray.train.v2.huggingface.transformers": "trainkit_hf",
    "ray.train.v2.jax": "trainkit_jax",
    "ray.train.tensorflow": "trainkit_tf",
    "ray.train.tensorflow.keras": "trainkit_tf",
    "ray.air.integrations.keras": "trainkit_tf",
    "ray.train.v2.tensorflow": "trainkit_tf",
    "ray.train.horovod": "trainkit_horovod",
    "ray.train.v2.horovod": "trainkit_horovod",
    "ray.tune.integration.ray_train": "trainkit.tune",
}

# (Ray module, Ray name) -> trainkit name, where trainkit renamed it; every other name keeps its Ray name.
NAMES: dict[tuple[str, str], str] = {
    ("ray.train.lightning", "RayDDPStrategy"): "DDPStrategy",
    ("ray.train.lightning", "RayFSDPStrategy"): "FSDPStrategy",
    ("ray.train.lightning", "RayDeepSpeedStrategy"): "DeepSpeedStrategy",
    ("ray.train.lightning", "RayLightningEnvironment"): "LightningEnvironment",
    ("ray.train.lightning", "RayTrainReportCallback"): "ReportCallback",
    ("ray.train.xgboost", "RayTrainReportCallback"): "ReportCallback",
    ("ray.train.lightgbm", "RayTrainReportCallback"): "ReportCallback",
    ("ray.train.huggingface.transformers", "RayTrainReportCallback"): "ReportCallback",
    ("ray.train.tensorflow.keras", "ReportCheckpointCallback"): "ReportCallback",
    ("ray.air.integrations.keras", "ReportCheckpointCallback"): "ReportCallback",
}


def rule_module(ray_module: str) -> str | None:
    """The Ray module of the rules that ``ray_module`` stands for: itself, or for a submodule of a Ray
    Train module that its package re-exports from (``ray.train.torch.torch_trainer`` for
    ``ray.train.torch``), the longest such module; None where no rule covers it."""
    if ray_module in MODULES:
        return ray_module
    if not ray_module.startswith("ray.train."):
        return None
    parts = ray_module.split(".")
    return next((".".join(parts[:n]) for n in range(len(parts) - 1, 1, -1) if ".".join(parts[:n]) in MODULES), None)


def trainkit_module(ray_module: str) -> str | None:
    """The trainkit module for a Ray module (or a submodule of a Ray Train module: its package's), or
    None where the module stays Ray's."""
    rule = rule_module(ray_module)
    return MODULES[rule] if rule else None


# Ray Tune's names that take a trainable, which may be a Ray Train trainer: migrate reports one given a trainer
TUNE_NAMES = ("Tuner", "run")


def tune_path(path: str) -> str:
    """A Ray Tune name by its public path, whatever submodule it was reached through:
    ``ray.tune.tuner.Tuner.restore`` is ``ray.tune.Tuner.restore``, ``ray.tune.tune.run`` is ``ray.tune.run``."""
    parts = path.split(".")
    if parts[:2] == ["ray", "tune"]:
        for i in range(3, len(parts)):
            if parts[i] in TUNE_NAMES and all(p.islower() for p in parts[2:i]):
                return ".".join(["ray", "tune", *parts[i:]])
    return path


def trainkit_name(ray_module: str, name: str) -> str:
    """A Ray module's name as trainkit spells it (the same name unless renamed). Renames apply to a
    module's v2 spelling too (``ray.train.v2.lightning`` as ``ray.train.lightning``)."""
    ray_module = rule_module(ray_module) or ray_module
    canonical = next((m for m, t in MODULES.items() if t == MODULES.get(ray_module) and (m, name) in NAMES), None)
    return NAMES.get((ray_module, name)) or (NAMES[(canonical, name)] if canonical else name)


def table() -> str:
    """The guide's rewrite table, one row a rule: modules, then renamed names."""
    rows = ["| Ray | trainkit |", "| --- | --- |"]
    rows += [f"| `{ray}` | `{tk}` |" for ray, tk in MODULES.items()]
    rows += [f"| `{module}.{name}` | `{MODULES[module]}.{new}` |" for (module, name), new in NAMES.items()]
    return "\n".join(rows)
