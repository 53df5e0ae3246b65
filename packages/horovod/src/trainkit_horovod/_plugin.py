"""Entry point of trainkit-horovod: registers the ``horovod`` backend. Imports no horovod.

No ``FRAMEWORK`` here: Horovod is not a pip dependency (pip cannot build it against torch >= 2.1),
so the plugin loads without it and ``HorovodConfig()`` says how to build and install it.
"""

from __future__ import annotations

from trainkit import hookimpl

from trainkit_horovod.config import HorovodConfig


@hookimpl
def trainkit_register_backends(registry) -> None:
    from trainkit_horovod.trainer import HorovodTrainer

    registry.register("horovod", HorovodConfig, HorovodTrainer)
