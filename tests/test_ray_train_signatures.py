"""Ray Train V2's public signatures against trainkit's: every parameter Ray Train 2.60 accepts on the
classes and functions of the migration guide's mapping is accepted by trainkit, or is one of the
refusals docs/migrating-from-ray-train.md lists (with why). Torch's half needs torch (skipped without)."""

import importlib
import inspect
import re
from pathlib import Path

import pytest

pytest.importorskip("ray.train.v2", reason="Ray Train's V2 API is not installed here")

GUIDE = Path(__file__).parents[1] / "docs" / "migrating-from-ray-train.md"

# (Ray Train V2 object, trainkit object, the name the guide's refusals use)
CORE = [
    ("ray.train.v2.api.config:ScalingConfig", "trainkit:ScalingConfig", "ScalingConfig"),
    ("ray.train.v2.api.config:RunConfig", "trainkit:RunConfig", "RunConfig"),
    ("ray.train.v2.api.config:FailureConfig", "trainkit:FailureConfig", "FailureConfig"),
    ("ray.train.v2.api.config:CheckpointConfig", "trainkit:CheckpointConfig", "CheckpointConfig"),
    ("ray.train:DataConfig", "trainkit:DataConfig", "DataConfig"),
    ("ray.train.v2.api.data_parallel_trainer:DataParallelTrainer", "trainkit:DataParallelTrainer",
     "DataParallelTrainer"),
    ("ray.train.v2.api.train_fn_utils:report", "trainkit:report", "report"),
    ("ray.train.v2.api.train_fn_utils:get_context", "trainkit:get_context", "get_context"),
    ("ray.train.v2.api.train_fn_utils:get_checkpoint", "trainkit:get_checkpoint", "get_checkpoint"),
    ("ray.train.v2.api.train_fn_utils:get_dataset_shard", "trainkit:get_dataset_shard", "get_dataset_shard"),
    ("ray.train.v2.api.train_fn_utils:get_all_reported_checkpoints", "trainkit:get_all_reported_checkpoints",
     "get_all_reported_checkpoints"),
    ("ray.train:Checkpoint.from_directory", "trainkit:Checkpoint.from_directory", "Checkpoint.from_directory"),
    ("ray.train:Checkpoint.as_directory", "trainkit:Checkpoint.as_directory", "Checkpoint.as_directory"),
    ("ray.train:Checkpoint.to_directory", "trainkit:Checkpoint.to_directory", "Checkpoint.to_directory"),
]
TORCH = [
    ("ray.train.v2.torch.torch_trainer:TorchTrainer", "trainkit_torch:TorchTrainer", "DataParallelTrainer"),
    ("ray.train.torch:TorchConfig", "trainkit_torch:TorchConfig", "TorchConfig"),
    ("ray.train.v2.torch.train_loop_utils:prepare_model", "trainkit_torch:prepare_model", "prepare_model"),
    ("ray.train.v2.torch.train_loop_utils:prepare_data_loader", "trainkit_torch:prepare_data_loader",
     "prepare_data_loader"),
    ("ray.train.v2.torch.train_loop_utils:get_device", "trainkit_torch:get_device", "get_device"),
    ("ray.train.v2.torch.train_loop_utils:get_devices", "trainkit_torch:get_devices", "get_devices"),
    ("ray.train.v2.torch.train_loop_utils:enable_reproducibility", "trainkit_torch:enable_reproducibility",
     "enable_reproducibility"),
]


def resolve(spec: str):
    module, _, attr = spec.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def parameters(obj) -> list[str]:
    return [name for name, p in inspect.signature(obj).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def refusals() -> dict[str, set[str]]:
    """The guide's table of refused parameters: ``Name`` -> parameter names."""
    block = GUIDE.read_text().split("<!-- refused -->\n")[1].split("<!-- /refused -->")[0]
    found: dict[str, set[str]] = {}
    for name, param in re.findall(r"^\| `(\w+)\((\w+)=\.\.\.\)` \|", block, re.M):
        found.setdefault(name, set()).add(param)
    return found


def check(pairs) -> list[str]:
    refused = refusals()
    gaps = []
    for ray_spec, trainkit_spec, label in pairs:
        ours = set(parameters(resolve(trainkit_spec)))
        for param in parameters(resolve(ray_spec)):
            if param in ours:
                assert param not in refused.get(label, set()), \
                    f"{label}({param}=...) is listed as refused in the guide, but trainkit accepts it"
            elif param not in refused.get(label, set()):
                gaps.append(f"{ray_spec}({param}=...): trainkit's {trainkit_spec} neither accepts it nor does "
                            f"{GUIDE.name} list it as refused")
    return gaps


def test_every_ray_train_parameter_is_accepted_or_a_documented_refusal():
    assert check(CORE) == []


def test_every_ray_train_torch_parameter_is_accepted_or_a_documented_refusal():
    pytest.importorskip("torch")
    pytest.importorskip("trainkit_torch")
    assert check(TORCH) == []


def test_the_guides_refusals_name_only_what_ray_accepts():
    """A refusal is of a real Ray Train V2 parameter (a typo in the table would hide a gap)."""
    labels = {label: ray for ray, _, label in CORE + TORCH}
    for name, params in refusals().items():
        assert name in labels, f"{GUIDE.name} refuses a parameter of {name}, which this test does not compare"
        assert params <= set(parameters(resolve(labels[name]))), (name, params)


def test_get_dataset_shard_takes_ray_trains_keyword(run_config):
    import trainkit

    def fn():
        trainkit.report({"rows": list(trainkit.get_dataset_shard(dataset_name="valid"))})

    result = trainkit.DataParallelTrainer(fn, datasets={"train": [1], "valid": [2, 3]},
                                          scaling_config=trainkit.ScalingConfig(num_workers=0),
                                          run_config=run_config()).fit()
    assert result.metrics == {"rows": [2, 3]}
