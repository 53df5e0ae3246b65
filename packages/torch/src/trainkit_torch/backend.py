"""``TorchBackend``: forms and tears down the ``torch.distributed`` process group on the workers."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

from trainkit import Backend
from trainkit.backend import interface_of

from trainkit_torch.config import TorchConfig
from trainkit_torch.train_loop_utils import gpu_index


def _init_process_group(backend: str | None, init_method: str, master: tuple[str, int], rank: int,
                        world_size: int, timeout_s: float) -> str:
    import torch
    import torch.distributed as dist

    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    addr, port = master
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    if backend == "nccl":
        torch.cuda.set_device(gpu_index())
    elif backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
        _bind_gloo_to_node_address(addr)
    timeout = timedelta(seconds=timeout_s)
    # init_method "env" and "tcp" both mean a TCPStore at MASTER_ADDR:MASTER_PORT. torch's own store
    # server listens on every interface whatever MASTER_ADDR says, so rank 0 hands it a socket
    # bound to the node's address alone (loopback when the group is on one node).
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    fd = socket.create_server((addr, port), family=family, backlog=world_size + 16).detach() if rank == 0 else None
    try:
        store = dist.TCPStore(addr, port, world_size, rank == 0, timeout, master_listen_fd=fd)
    except NotImplementedError:  # some torch releases' libuv server takes no listening fd: the classic one does
        store = dist.TCPStore(addr, port, world_size, rank == 0, timeout, master_listen_fd=fd, use_libuv=False)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    return backend


def _bind_gloo_to_node_address(master_addr: str) -> None:
    """Gloo binds the address this machine's hostname resolves to, else loopback: across machines
    the other ranks may not reach that. It binds the interface holding Ray's node address instead
    (loopback when the whole group is on one node). Set ``GLOO_SOCKET_IFNAME`` to choose another."""
    import ray

    iface = interface_of("127.0.0.1" if master_addr == "127.0.0.1" else ray.util.get_node_ip_address())
    if iface:
        os.environ["GLOO_SOCKET_IFNAME"] = iface


def _set_rank_env(world_rank: int, local_rank: int, local_world_size: int, node_rank: int) -> None:
    """torchrun's variables; and on a worker without GPUs, Accelerate's switch to multi-CPU (without
    it, ``Accelerator()`` and ``transformers.Trainer`` would each train alone on every worker)."""
    import torch

    os.environ.update(LOCAL_RANK=str(local_rank), LOCAL_WORLD_SIZE=str(local_world_size),
                      NODE_RANK=str(node_rank), GROUP_RANK=str(node_rank))
    if not torch.cuda.is_available():
        os.environ["ACCELERATE_USE_CPU"] = "true"


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


class TorchBackend(Backend):
    def on_start(self, worker_group, backend_config: TorchConfig) -> None:
        workers = worker_group.workers
        master = worker_group.free_address(0)
        import ray

        node_sizes: dict[int, int] = {}
        for w in workers:
            node_sizes[w.node_rank] = node_sizes.get(w.node_rank, 0) + 1
        ray.get([w.actor.execute.remote(_set_rank_env, w.world_rank, w.local_rank, node_sizes[w.node_rank],
                                        w.node_rank) for w in workers])
        ray.get([w.actor.execute.remote(_init_process_group, backend_config.backend, backend_config.init_method,
                                        master, w.world_rank, len(workers), backend_config.timeout_s)
                 for w in workers])

    def on_shutdown(self, worker_group, backend_config: TorchConfig) -> None:
        worker_group.execute(_destroy_process_group)
