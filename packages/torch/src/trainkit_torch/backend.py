"""``TorchBackend``: forms and tears down the ``torch.distributed`` process group on the workers."""

from __future__ import annotations

import os
from datetime import timedelta

from trainkit import Backend
from trainkit.backend import WorkerGroup, interface_of, take_listening_socket

from trainkit_torch.config import TorchConfig
from trainkit_torch.train_loop_utils import gpu_index


def _init_process_group(backend: str | None, addr: str, port: int, rank: int, world_size: int,
                        timeout_s: float) -> str:
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():  # Accelerate's switch to multi-CPU: without it, Accelerator()
        os.environ["ACCELERATE_USE_CPU"] = "true"  # and transformers.Trainer would each train alone
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(gpu_index())
    elif backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
        _bind_gloo_to_node_address(addr)
    timeout = timedelta(seconds=timeout_s)
    # init_method "env" and "tcp" both mean a TCPStore at MASTER_ADDR:MASTER_PORT. torch's own store
    # server listens on every interface whatever MASTER_ADDR says, so rank 0 hands it the socket its
    # worker bound to the node's address alone (loopback when the group is on one node) when the
    # port was chosen (rendezvous(listen=True)): no other process can take the port in between.
    fd = take_listening_socket(port).detach() if rank == 0 else None
    try:
        store = dist.TCPStore(addr, port, world_size, rank == 0, timeout, master_listen_fd=fd)
    except NotImplementedError:  # some torch releases' libuv server takes no listening fd: the classic one does
        store = dist.TCPStore(addr, port, world_size, rank == 0, timeout, master_listen_fd=fd, use_libuv=False)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
    _group_kept[:] = [dist.group.WORLD]
    return backend


# The worker's process group, kept until the backend's shutdown. A training function that ends as a
# torchrun script does (``destroy_process_group()``, then its DDP model freed as it returns) would
# otherwise free the group's last holder, the model's reducer, in its own thread with the GIL held:
# the group's destructor joins gloo's worker threads, one of which may need the GIL to free a finished
# collective (torch 2.13 keeps a Python context in it): both wait forever (a worker hung, 1 in 3 fits).
# Freed here at shutdown instead, when those threads are long idle.
_group_kept: list = []


def _bind_gloo_to_node_address(master_addr: str) -> None:
    """Gloo binds the address this machine's hostname resolves to, else loopback: across machines
    the other ranks may not reach that. It binds the interface holding Ray's node address instead
    (loopback when the whole group is on one node). Set ``GLOO_SOCKET_IFNAME`` to choose another."""
    import ray

    iface = interface_of("127.0.0.1" if master_addr == "127.0.0.1" else ray.util.get_node_ip_address())
    if iface:
        os.environ["GLOO_SOCKET_IFNAME"] = iface


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    _group_kept.clear()


class TorchBackend(Backend):
    def on_start(self, worker_group: WorkerGroup, backend_config: TorchConfig) -> None:
        ranks = worker_group.rendezvous(listen=True)
        worker_group.set_env([r.env() for r in ranks])  # torchrun's variables (init_method "env" reads them)
        worker_group.execute_per_rank(_init_process_group, [
            (backend_config.backend, r.master_addr, r.master_port, r.world_rank, r.world_size, backend_config.timeout_s)
            for r in ranks])

    def on_shutdown(self, worker_group: WorkerGroup, backend_config: TorchConfig) -> None:
        worker_group.execute(_destroy_process_group)
