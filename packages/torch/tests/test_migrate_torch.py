"""trainkit migrate where what it maps to must be looked up in trainkit-torch (installed here)."""

from trainkit._internal.tools.migrate import migrate_source


def test_a_submodule_reached_by_attribute_is_reported_not_left_silently():
    [left] = migrate_source("import ray.train.torch.torch_trainer\nray.train.torch.torch_trainer.TorchTrainer(f)\n",
                            "script.py").unrewritten
    assert str(left).startswith("script.py:2: ray.train.torch.torch_trainer has no trainkit counterpart")
