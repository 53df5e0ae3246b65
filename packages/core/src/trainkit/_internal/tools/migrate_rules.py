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


def trainkit_module(ray_module: str) -> str | None:
    """The trainkit module for a Ray module, or None where the module stays Ray's."""
    return MODULES.get(ray_module)


def trainkit_name(ray_module: str, name: str) -> str:
    """A Ray module's name as trainkit spells it (the same name unless renamed). Renames apply to a
    module's v2 spelling too (``ray.train.v2.lightning`` as ``ray.train.lightning``)."""
    canonical = next((m for m, t in MODULES.items() if t == MODULES.get(ray_module) and (m, name) in NAMES), None)
    return NAMES.get((ray_module, name)) or (NAMES[(canonical, name)] if canonical else name)


def table() -> str:
    """The guide's rewrite table, one row a rule: modules, then renamed names."""
    rows = ["| Ray | trainkit |", "| --- | --- |"]
    rows += [f"| `{ray}` | `{tk}` |" for ray, tk in MODULES.items()]
    rows += [f"| `{module}.{name}` | `{MODULES[module]}.{new}` |" for (module, name), new in NAMES.items()]
    return "\n".join(rows)
