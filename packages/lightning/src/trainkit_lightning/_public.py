"""The public names. Each builds the class of the Lightning namespace the training code imported
(``lightning.pytorch`` or ``pytorch_lightning``, see ``_build``), which also subclasses it, so
``isinstance(x, trainkit_lightning.DDPStrategy)`` holds for either."""

from __future__ import annotations

from typing import Any


class _BuiltOnUse:
    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if "_public" in cls.__dict__:  # called by its public name: take the namespace's class
            from trainkit_lightning._build import classes_for, current_namespace

            cls = getattr(classes_for(current_namespace()), cls.__name__)
        return super().__new__(cls)


class DDPStrategy(_BuiltOnUse):
    """Lightning's ``DDPStrategy`` on trainkit's process group and device, sampling by trainkit's
    ranks. Takes ``DDPStrategy``'s arguments."""

    _public = True


class FSDPStrategy(_BuiltOnUse):
    """Lightning's ``FSDPStrategy`` on trainkit's process group and device. Takes its arguments."""

    _public = True


class DeepSpeedStrategy(_BuiltOnUse):
    """Lightning's ``DeepSpeedStrategy`` on trainkit's process group and device (CUDA GPUs only, as
    in Lightning). Takes its arguments."""

    _public = True


class LightningEnvironment(_BuiltOnUse):
    """A Lightning ``ClusterEnvironment`` reading ranks and world size from ``trainkit.get_context()``."""

    _public = True


class ReportCallback(_BuiltOnUse):
    """A Lightning callback: at the end of every ``every_n_epochs``-th training epoch (and the last),
    saves a Lightning checkpoint (``checkpoint.ckpt``) and reports it with ``trainer.callback_metrics``
    plus ``epoch`` and ``step``. ``checkpoint_upload_mode`` is ``trainkit.report``'s.

    Example::

        trainer = pl.Trainer(max_epochs=5, strategy=DDPStrategy(), plugins=[LightningEnvironment()],
                             callbacks=[ReportCallback()])
    """

    _public = True
    CHECKPOINT_NAME = "checkpoint.ckpt"
