"""trainkit-toyfw with a mistake that shows only in other backends' runs: its accelerator hook,
which trainkit calls for every run, pins every worker to one thread, whatever the backend."""

from trainkit import hookimpl
from trainkit_toyfw import *
from trainkit_toyfw import FRAMEWORK, trainkit_register_backends  # noqa: F401


@hookimpl
def trainkit_setup_accelerators(worker_group, scaling_config, backend_config) -> None:
    # the mistake: meant for toyfw's own runs (isinstance(backend_config, ToyConfig) forgotten)
    worker_group.set_env({"OPENBLAS_NUM_THREADS": "1"})
