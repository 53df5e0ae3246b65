"""``JaxBackend``: ``jax.distributed.initialize`` on every worker before the training function, and
``jax.distributed.shutdown`` after it, so a restarted attempt initializes again."""

from __future__ import annotations

import inspect
import logging

import trainkit
from trainkit import Backend

from trainkit_jax.config import JaxConfig


def _gpu_platform() -> str:
    """JAX's name for the GPUs its installed plugin drives. "gpu" would ask for every GPU platform JAX
    knows (cuda, rocm, ...), and JAX fails on the first one whose plugin is not installed."""
    from importlib import metadata

    names = {(dist.metadata["Name"] or "").lower().replace("_", "-") for dist in metadata.distributions()}
    return next((p for p in ("cuda", "rocm") if any(n.startswith(f"jax-{p}") for n in names)), "gpu")


def _initialize(coordinator: str, platform: str, timeout_s: float) -> None:
    import jax

    jax.config.update("jax_platforms", _gpu_platform() if platform == "gpu" else platform)
    if platform == "cpu":
        try:  # cross-process collectives on CPUs (the default from JAX 0.5 on; absent before 0.4.27)
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        except AttributeError:
            pass
    context = trainkit.get_context()
    kwargs = {"coordinator_address": coordinator, "num_processes": context.get_world_size(),
              "process_id": context.get_world_rank()}
    if "initialization_timeout" in inspect.signature(jax.distributed.initialize).parameters:
        kwargs["initialization_timeout"] = int(timeout_s)
    jax.distributed.initialize(**kwargs)


def _shutdown() -> None:
    import jax

    try:
        jax.distributed.shutdown()
    except Exception as exc:  # noqa: BLE001 - a peer that already died fails the shutdown barrier
        logging.getLogger("trainkit.jax").debug("jax.distributed.shutdown: %s", exc)


class JaxBackend(Backend):
    def on_start(self, worker_group, backend_config: JaxConfig) -> None:
        # rank 0 hosts the coordinator; its worker holds the port until then (gRPC binds beside the hold)
        host, port = worker_group.free_address(0, hold=True)
        # Ray makes each worker's reserved chips its only visible ones: JAX takes them all.
        platform = backend_config.platform or next(
            (p for p in ("tpu", "gpu") if any(w.accelerator_ids.get(p.upper()) for w in worker_group.workers)), "cpu")
        worker_group.execute(_initialize, f"{host}:{port}", platform, backend_config.timeout_s)

    def on_shutdown(self, worker_group, backend_config: JaxConfig) -> None:
        worker_group.execute(_shutdown)
