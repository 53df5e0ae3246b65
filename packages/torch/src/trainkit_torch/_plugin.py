"""Entry point of trainkit-torch: registers the ``torch`` backend. Imports no torch."""

from __future__ import annotations

from trainkit import hookimpl

from trainkit_torch.config import TorchConfig

FRAMEWORK = "torch"  # the distribution whose version range (from our metadata) the loader checks


@hookimpl
def trainkit_register_backends(registry) -> None:
    from trainkit_torch.trainer import TorchTrainer

    registry.register("torch", TorchConfig, TorchTrainer)


def _gpu_env(visible: str, own: list[str]) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": visible,
            "TRAINKIT_GPU_INDEX": str(visible.split(",").index(own[0])) if own else "0"}


@hookimpl
def trainkit_setup_accelerators(worker_group, scaling_config, backend_config) -> None:
    """Every worker on a node sees all of that node's GPUs, so NCCL can use peer-to-peer paths."""
    if not (scaling_config.use_gpu and isinstance(backend_config, TorchConfig)):
        return
    per_node: dict[str, set[str]] = {}
    for w in worker_group.workers:
        per_node.setdefault(w.node_id, set()).update(w.accelerator_ids.get("GPU", []))
    worker_group.set_env([_gpu_env(",".join(sorted(per_node[w.node_id], key=int)), w.accelerator_ids.get("GPU", []))
                          for w in worker_group.workers])
