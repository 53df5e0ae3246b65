"""``trainkit migrate``'s rewriter: each Ray Train import idiom, what it reports, what it leaves alone.
Pure source-to-source: nothing here starts Ray."""

import json
import textwrap
from pathlib import Path

import pytest
from trainkit._internal.tools.migrate import migrate_source
from trainkit._internal.tools.migrate_rules import table
from trainkit.cli import main

GUIDE = Path(__file__).parents[3] / "docs" / "migrating-from-ray-train.md"


def migrated(source: str) -> str:
    migration = migrate_source(textwrap.dedent(source))
    assert migration.unrewritten == []
    return migration.migrated


def code(source: str) -> str:
    return textwrap.dedent(source)


def test_from_imports_are_edited_in_place_keeping_comments_and_layout():
    assert migrated("""\
        from ray.train import (  # the configs
            RunConfig,   # keep me
            ScalingConfig,
        )
        from ray.train.lightning import RayDDPStrategy, RayTrainReportCallback as Report
        strategy = RayDDPStrategy()  # é, a non-ASCII comment before nothing
        x = "é"; y = RayDDPStrategy; path = Report.CHECKPOINT_NAME
        """) == code("""\
        from trainkit import (  # the configs
            RunConfig,   # keep me
            ScalingConfig,
        )
        from trainkit_lightning import DDPStrategy, ReportCallback as Report
        strategy = DDPStrategy()  # é, a non-ASCII comment before nothing
        x = "é"; y = DDPStrategy; path = Report.CHECKPOINT_NAME
        """)


def test_from_ray_import_train_and_its_submodules_by_attribute():
    assert migrated("""\
        from ray import train, tune
        train.report({"loss": 1}, checkpoint=train.Checkpoint.from_directory("."))
        trainer = train.torch.TorchTrainer(f, scaling_config=train.ScalingConfig(num_workers=2))
        tune.Tuner(f)
        """) == code("""\
        from ray import tune
        import trainkit as train
        import trainkit_torch
        train.report({"loss": 1}, checkpoint=train.Checkpoint.from_directory("."))
        trainer = trainkit_torch.TorchTrainer(f, scaling_config=train.ScalingConfig(num_workers=2))
        tune.Tuner(f)
        """)


def test_import_ray_stays_for_ray_init_and_gains_the_trainkit_modules_it_reached():
    assert migrated("""\
        import ray
        ray.init()
        trainer = ray.train.torch.TorchTrainer(f, run_config=ray.train.RunConfig(
            failure_config=ray.train.FailureConfig(max_failures=1)))
        """) == code("""\
        import ray
        import trainkit_torch
        import trainkit
        ray.init()
        trainer = trainkit_torch.TorchTrainer(f, run_config=trainkit.RunConfig(
            failure_config=trainkit.FailureConfig(max_failures=1)))
        """)


def test_import_ray_train_keeps_ray_bound_where_ray_data_is_used():
    assert migrated("""\
        import ray.train
        ds = ray.data.range(8)
        ray.train.get_context().get_world_rank()
        """) == code("""\
        import ray
        import trainkit
        ds = ray.data.range(8)
        trainkit.get_context().get_world_rank()
        """)
    assert migrated("import ray.train\nray.train.report({})\n") == "import trainkit\ntrainkit.report({})\n"


@pytest.mark.parametrize(("ray", "trainkit"), [
    ("import ray.train.lightning\nray.train.lightning.RayLightningEnvironment()\n",
     "import trainkit_lightning\ntrainkit_lightning.LightningEnvironment()\n"),
    ("import ray.train.huggingface.transformers\nray.train.huggingface.transformers.RayTrainReportCallback()\n",
     "import trainkit_hf\ntrainkit_hf.ReportCallback()\n"),
    ("import ray.train.lightning as rl\nrl.RayDDPStrategy(); rl.prepare_trainer\n",
     "import trainkit_lightning as rl\nrl.DDPStrategy(); rl.prepare_trainer\n"),
    ("import ray.train as train\nimport ray.train.torch  # noqa\ntrain.torch.get_device()\n",
     "import trainkit as train\nimport trainkit_torch\ntrainkit_torch.get_device()\n"),
    ("from ray.train.v2.api.config import ScalingConfig\nfrom ray.train.v2.api.data_parallel_trainer import "
     "DataParallelTrainer\n", "from trainkit import ScalingConfig\nfrom trainkit import DataParallelTrainer\n"),
    ("from ray.train.v2.lightgbm.lightgbm_trainer import LightGBMTrainer\n",
     "from trainkit_lightgbm import LightGBMTrainer\n"),
    ("from ray.tune.integration.ray_train import TuneReportCallback\n",
     "from trainkit.tune import TuneReportCallback\n"),
    ("from ray.train.collective import barrier\n", "from trainkit.collective import barrier\n"),
    ("from ray.train.tensorflow.keras import ReportCheckpointCallback\nReportCheckpointCallback()\n",
     "from trainkit_tf import ReportCallback\nReportCallback()\n"),
    ("def f():\n    import ray.train\n    ray.train.report({})\n",
     "def f():\n    import trainkit\n    trainkit.report({})\n"),
], ids=["import-lightning", "import-hf", "import-as", "import-as-submodule", "v2-api", "v2-plugin", "tune",
        "collective", "keras-rename", "in-a-function"])
def test_idioms(ray, trainkit):
    assert migrated(ray) == trainkit


def test_ray_data_tune_and_other_code_stay_byte_for_byte():
    source = "import ray\r\nfrom ray import tune, data  # Ray's own\r\n\r\nray.init(num_cpus=2)\r\nx = 'ray.train'\r\n"
    assert migrated(source) == source


@pytest.mark.parametrize(("source", "line", "message"), [
    ("from ray.train import NCCLHangError, ScalingConfig\n", 1, "ray.train.NCCLHangError has no trainkit counterpart"),
    ("import ray\nray.train.NCCLHangError\n", 2, "ray.train.NCCLHangError has no trainkit counterpart"),
    ("from ray import tune\ntrainer = TorchTrainer(f)\ntune.Tuner(trainer).fit()\n", 3, "ray.tune.Tuner(trainer)"),
    ("import importlib\nimportlib.import_module('ray.train.torch')\n", 2, "dynamic import of 'ray.train.torch'"),
    ("from ray.train.torch.config import _TorchBackend\n", 1,
     "ray.train.torch.config._TorchBackend has no trainkit counterpart (trainkit_torch has no _TorchBackend)"),
    ("from ray.train import (\n", 1, "does not parse"),
])
def test_what_cannot_be_rewritten_is_reported_with_its_line(source, line, message):
    [left] = migrate_source(source, "script.py").unrewritten
    assert message in left.message and str(left).startswith(f"script.py:{line}: ")


def test_a_name_trainkit_lacks_stays_imported_from_ray_the_rest_moves():
    migration = migrate_source("from ray.train import NCCLHangError, ScalingConfig\n")
    assert migration.migrated == "from ray.train import NCCLHangError\nfrom trainkit import ScalingConfig\n"


def test_tuner_with_a_trial_function_is_fine():
    assert migrated("from ray import tune\ndef trial(config): ...\ntune.Tuner(trial).fit()\n")


def test_the_guides_table_is_the_rules():
    block = GUIDE.read_text().split("<!-- rewrites -->\n")[1].split("\n<!-- /rewrites -->")[0]
    assert block == table(), "regenerate the table: python -c 'from trainkit._internal.tools.migrate_rules import table; " \
                             "print(table())'"


def test_cli_prints_a_diff_writes_with_write_and_exit_status_says_what_was_left(tmp_path, capsys):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    clean = package / "clean.py"
    clean.write_text("from ray.train import ScalingConfig  # configs\n")
    (package / "sub" / "notes.txt").write_text("from ray.train import ScalingConfig\n")  # not Python: untouched
    assert main(["migrate", str(package)]) == 0
    out = capsys.readouterr().out
    assert "-from ray.train import ScalingConfig  # configs\n+from trainkit import ScalingConfig  # configs" in out
    assert clean.read_text().startswith("from ray.train")  # a diff only
    left = package / "sub" / "left.py"
    left.write_text("import ray\nray.train.NCCLHangError\n")
    assert main(["migrate", "--write", str(package)]) == 1
    captured = capsys.readouterr()
    assert f"rewrote {clean}" in captured.out
    assert f"not rewritten: {left}:2: ray.train.NCCLHangError has no trainkit counterpart" in captured.err
    assert clean.read_text() == "from trainkit import ScalingConfig  # configs\n"
    assert (package / "sub" / "notes.txt").read_text() == "from ray.train import ScalingConfig\n"
    assert main(["migrate", "--json", str(left)]) == 1
    assert json.loads(capsys.readouterr().out) == {"changed": [], "unrewritten": [
        {"path": str(left), "line": 2, "message": "ray.train.NCCLHangError has no trainkit counterpart (trainkit has "
                                                  "no NCCLHangError)"}]}
    assert main(["migrate", str(tmp_path / "missing.py")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


@pytest.mark.parametrize("source", [
    "import ray\nconfig = ray.train.DataConfig()\nimport ray.util\n",
    "import ray\ndef f():\n    return ray.train.DataConfig()\nimport ray\nf()\n",
    "def f():\n    import ray\n    config = ray.train.DataConfig()\n    import ray.util\n    return config\nf()\n",
    '"""A docstring."""\nfrom __future__ import annotations\nimport ray.util\n'
    "x = ray.train.ScalingConfig(num_workers=2)\nimport ray\ny = ray.train.RunConfig()\n",
    "from ray import train\nx = train.ScalingConfig(num_workers=2)\nfrom ray import train\n",
    "def f():\n    import ray.train\n    return ray.train.RunConfig()\nimport ray\nx = ray.train.RunConfig()\n",
], ids=["later-import-ray-util", "use-in-a-function-then-import", "function-local", "future-and-docstring",
        "from-ray-import-train-twice", "a-function-imports-it-first"])
def test_every_name_it_introduces_is_bound_before_its_first_use(source):
    """The trainkit modules a use needs are imported with the first import that binds the name it goes
    through (in that scope), not after a later one: the migrated file runs."""
    exec(compile(migrated(source), "<migrated>", "exec"), {"__name__": "migrated"})


def test_a_needed_module_follows_the_first_import_of_its_scope():
    assert migrated("import ray\nconfig = ray.train.DataConfig()\nimport ray.util\n") == \
        "import ray\nimport trainkit\nconfig = trainkit.DataConfig()\nimport ray.util\n"
    assert migrated("def f():\n    import ray\n    config = ray.train.DataConfig()\n    import ray.util\n") == \
        "def f():\n    import ray\n    import trainkit\n    config = trainkit.DataConfig()\n    import ray.util\n"


def test_ray_trains_preemption_api_moves_over_with_its_names():
    assert migrated("""\
        import ray.train
        from ray.train.v2.api.preemption import PreemptionInfo
        config = ray.train.FailureConfig(max_preemption_failures=2, preemption_grace_s=10)
        info: PreemptionInfo = ray.train.get_preemption_info()
        """) == code("""\
        import trainkit
        from trainkit import PreemptionInfo
        config = trainkit.FailureConfig(max_preemption_failures=2, preemption_grace_s=10)
        info: PreemptionInfo = trainkit.get_preemption_info()
        """)


TUNE_WRAPS = "wraps a trainer, which trainkit does not support"


@pytest.mark.parametrize("source", [
    "from ray.tune.tuner import Tuner\ntrainer = TorchTrainer(f)\nTuner(trainer).fit()\n",
    "import ray.tune as tune\ntrainer = TorchTrainer(f)\ntune.Tuner(trainer).fit()\n",
    "from ray import tune as t\ntrainer = TorchTrainer(f)\nt.Tuner(trainer).fit()\n",
    "import ray.tune.tuner\ntrainer = TorchTrainer(f)\nray.tune.tuner.Tuner(trainer).fit()\n",
    "import ray\ntrainer = TorchTrainer(f)\nray.tune.Tuner(trainer).fit()\n",
    "from ray.tune import tuner\ntrainer = TorchTrainer(f)\ntuner.Tuner(trainable=trainer).fit()\n",
    "from ray import tune\ntrainer = TorchTrainer(f)\ntune.Tuner.restore('/runs/x', trainable=trainer).fit()\n",
    "from ray.tune.tuner import Tuner\ntrainer = TorchTrainer(f)\nTuner.restore('/runs/x', trainer).fit()\n",
    "from ray import tune\ntrainer = TorchTrainer(f)\ntune.run(trainer)\n",
    "from ray.tune.tune import run\ntrainer = TorchTrainer(f)\nrun(trainer)\n",
    "from ray.train.torch import TorchTrainer as TT\nfrom ray.tune import Tuner\ntrainer = TT(f)\nTuner(trainer)\n",
], ids=["tuner-submodule", "import-tune-as", "from-ray-import-tune-as", "import-submodule", "import-ray",
        "from-tune-import-tuner-module", "restore-keyword", "restore-positional", "tune-run", "tune-run-submodule",
        "aliased-trainer"])
def test_a_tune_wrapped_trainer_is_reported_whatever_the_import_path(source):
    [left] = [u for u in migrate_source(source, "script.py").unrewritten if TUNE_WRAPS in u.message]
    assert str(left).startswith(f"script.py:{len(source.splitlines())}: ")


@pytest.mark.parametrize("source", [
    "from ray.tune.tuner import Tuner\ndef trial(config): ...\nTuner(trial).fit()\n",
    "import ray.tune as tune\ntune.Tuner.restore('/runs/x', trainable=trial)\n",
])
def test_a_tune_trial_function_is_fine_whatever_the_import_path(source):
    assert migrate_source(source).unrewritten == []


@pytest.mark.parametrize(("ray", "trainkit"), [
    ("from ray.train.torch.torch_trainer import TorchTrainer\nTorchTrainer(f)\n",
     "from trainkit_torch import TorchTrainer\nTorchTrainer(f)\n"),
    ("from ray.train.torch.config import TorchConfig\n", "from trainkit_torch import TorchConfig\n"),
    ("from ray.train.v2.torch.train_loop_utils import prepare_model\n", "from trainkit_torch import prepare_model\n"),
    ("import ray.train.torch.torch_trainer as tt\ntt.TorchTrainer(f)\n", "import trainkit_torch as tt\ntt.TorchTrainer(f)\n"),
    ("from ray.train.lightning._lightning_utils import RayDDPStrategy\nRayDDPStrategy()\n",
     "from trainkit_lightning import DDPStrategy\nDDPStrategy()\n"),
    ("from ray.train._checkpoint import Checkpoint\n", "from trainkit import Checkpoint\n"),
], ids=["torch-trainer", "torch-config", "v2-train-loop-utils", "import-as", "renamed", "checkpoint"])
def test_names_reached_through_a_submodule_are_rewritten(ray, trainkit):
    assert migrated(ray) == trainkit


@pytest.mark.parametrize("source", [
    "import ray\nfrom ray.tune.tuner import Tuner\nfrom ray.train.torch import TorchTrainer\nimport ray.train.torch\n"
    "def f(config):\n    ray.train.report({})\nTuner(f).fit()\nray.train.torch.get_device()\n",
    "import ray.train as train\nimport ray.train.torch  # noqa\ntrain.torch.get_device()\n",
    "from ray import train\nx = train.ScalingConfig(num_workers=2)\nfrom ray import train, tune\n",
    "import ray.train as t\nimport ray.train as t\nt.report\n",
    "import ray\nray.train.torch.get_device()\nimport ray.train.torch; x = 1\n",
], ids=["tune-script", "import-as-then-submodule", "from-ray-import-train-twice", "same-alias-twice", "shares-a-line"])
def test_no_import_is_written_twice(source):
    out = migrated(source)
    imports = [line.split("#")[0].strip() for line in out.splitlines() if line.split("#")[0].strip().startswith("import ")
               or line.strip().startswith("from ")]
    written = [i for i in imports if "trainkit" in i]
    assert len(written) == len(set(written)), out
    if "trainkit_torch" not in out:  # core's tests run without torch
        exec(compile(out, "<migrated>", "exec"), {"__name__": "migrated"})
