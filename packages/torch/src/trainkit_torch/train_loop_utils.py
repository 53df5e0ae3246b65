"""Helpers called inside a training function: devices, model wrapping, data sharding, seeding."""

from __future__ import annotations

import os
import random
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader


def _world() -> tuple[int, int]:
    """(rank, world size) from trainkit's context, or (0, 1) outside a trainkit run."""
    try:
        import trainkit

        ctx = trainkit.get_context()
        return ctx.get_world_rank(), ctx.get_world_size()
    except RuntimeError:
        return 0, 1


def gpu_index() -> int:
    """This worker's GPU among the visible ones (trainkit shares a node's GPUs across its workers)."""
    return int(os.environ.get("TRAINKIT_GPU_INDEX", os.environ.get("LOCAL_RANK", "0")))


def get_devices() -> list["torch.device"]:
    """The devices this worker should use: its GPU(s) when it reserved any, else the CPU."""
    import torch

    if torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES", "") != "":
        return [torch.device("cuda", gpu_index())]
    return [torch.device("cpu")]


def get_device() -> "torch.device":
    """This worker's device: ``cuda:<its GPU>`` or ``cpu``.

    Example::

        model = model.to(trainkit_torch.get_device())
    """
    return get_devices()[0]


def prepare_model(model: "torch.nn.Module", move_to_device: bool = True, parallel_strategy: str | None = "ddp",
                  parallel_strategy_kwargs: dict[str, Any] | None = None) -> "torch.nn.Module":
    """Move ``model`` to this worker's device and wrap it for data parallelism.

    ``parallel_strategy``: ``"ddp"`` (DistributedDataParallel), ``"fsdp"`` (FullyShardedDataParallel,
    GPU only) or None (no wrapping). With one worker the model is only moved.

    Example::

        model = trainkit_torch.prepare_model(torch.nn.Linear(8, 1))
    """
    import torch.distributed as dist

    if parallel_strategy not in ("ddp", "fsdp", None):
        raise ValueError(f"parallel_strategy={parallel_strategy!r} is invalid: expected 'ddp', 'fsdp' or None")
    device = get_device()
    if move_to_device:
        model = model.to(device)
    _, world_size = _world()
    if parallel_strategy is None or world_size < 2 or not dist.is_initialized():
        return model
    kwargs = dict(parallel_strategy_kwargs or {})
    if parallel_strategy == "fsdp":
        if device.type != "cuda":
            raise ValueError("parallel_strategy='fsdp' needs GPUs (ScalingConfig(use_gpu=True)); use 'ddp' on CPU")
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(model, device_id=device, **kwargs)
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        kwargs.setdefault("device_ids", [device])
    return DistributedDataParallel(model, **kwargs)


class _DeviceLoader:
    """Iterates a DataLoader, moving batches to the device and advancing the sampler's epoch.

    With ``auto_transfer`` on a CUDA device, the next batch is copied on a side stream while the
    current one is used (the training stream waits for that copy before it gets the batch).
    """

    def __init__(self, loader: "DataLoader", device: "torch.device", move: bool, auto_transfer: bool = False):
        self._loader, self._device, self._move = loader, device, move
        self._auto_transfer = bool(auto_transfer and move and device.type == "cuda")
        self._passes = 0
        self._auto_epoch = 0  # the epoch we last set; anything else was set by the user

    def __len__(self) -> int:
        return len(self._loader)

    def __getattr__(self, name: str) -> Any:
        if "_loader" not in self.__dict__:  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._loader, name)

    def _to_device(self, batch: Any, non_blocking: bool = True) -> Any:
        import torch

        if isinstance(batch, torch.Tensor):
            return batch.to(self._device, non_blocking=non_blocking)
        if isinstance(batch, (list, tuple)):
            return type(batch)(self._to_device(b, non_blocking) for b in batch)
        if isinstance(batch, dict):
            return {k: self._to_device(v, non_blocking) for k, v in batch.items()}
        return batch

    @staticmethod
    def _tensors(batch: Any) -> Iterator[Any]:
        import torch

        if isinstance(batch, torch.Tensor):
            yield batch
        elif isinstance(batch, (list, tuple)):
            for b in batch:
                yield from _DeviceLoader._tensors(b)
        elif isinstance(batch, dict):
            for b in batch.values():
                yield from _DeviceLoader._tensors(b)

    def _side_stream_batches(self) -> Iterator[Any]:
        """Copy batch n+1 on a side stream while batch n is used on the current stream."""
        import torch

        stream = torch.cuda.Stream(device=self._device)
        end = object()
        source = iter(self._loader)

        def copy_next() -> Any:
            batch = next(source, end)
            if batch is end:
                return end
            with torch.cuda.stream(stream):
                return self._to_device(batch)

        ahead = copy_next()
        while ahead is not end:
            current = torch.cuda.current_stream(self._device)
            current.wait_stream(stream)
            for tensor in self._tensors(ahead):
                if tensor.device.type == "cuda":
                    tensor.record_stream(current)  # its memory is in use on the training stream too
            batch, ahead = ahead, copy_next()
            yield batch

    def __iter__(self) -> Iterator[Any]:
        sampler = getattr(self._loader, "sampler", None)
        if hasattr(sampler, "set_epoch") and getattr(sampler, "epoch", 0) == self._auto_epoch:
            self._auto_epoch = self._passes  # a new shuffle each pass, unless the user set the epoch
            sampler.set_epoch(self._auto_epoch)
        self._passes += 1
        if self._auto_transfer:
            yield from self._side_stream_batches()
            return
        for batch in self._loader:
            yield self._to_device(batch) if self._move else batch


def prepare_data_loader(data_loader: "DataLoader", add_dist_sampler: bool = True,
                        move_to_device: bool = True, auto_transfer: bool = True) -> Any:
    """Shard ``data_loader`` across workers with a ``DistributedSampler`` and move batches to the device.

    Shuffling is kept if the original loader shuffled; the epoch advances on each pass, so every
    epoch gets a new order with no ``set_epoch`` call.

    ``auto_transfer`` (Ray Train's meaning): on a GPU, copy the next batch to the device on a
    separate CUDA stream while the current batch trains. On the CPU it changes nothing, and it is
    ignored when ``move_to_device`` is False.

    Example::

        loader = trainkit_torch.prepare_data_loader(DataLoader(dataset, batch_size=32, shuffle=True))
    """
    from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler

    rank, world_size = _world()
    if add_dist_sampler and world_size > 1 and not isinstance(data_loader.dataset, IterableDataset) \
            and not isinstance(data_loader.sampler, DistributedSampler):
        shuffle = isinstance(data_loader.sampler, RandomSampler)
        sampler = DistributedSampler(data_loader.dataset, num_replicas=world_size, rank=rank, shuffle=shuffle)
        data_loader = DataLoader(
            data_loader.dataset, batch_size=data_loader.batch_size, sampler=sampler,
            num_workers=data_loader.num_workers, collate_fn=data_loader.collate_fn,
            pin_memory=data_loader.pin_memory, drop_last=data_loader.drop_last, timeout=data_loader.timeout,
            worker_init_fn=data_loader.worker_init_fn, generator=data_loader.generator,
            prefetch_factor=data_loader.prefetch_factor if data_loader.num_workers else None,
            persistent_workers=data_loader.persistent_workers)
    return _DeviceLoader(data_loader, get_device(), move_to_device, auto_transfer)


def enable_reproducibility(seed: int = 0) -> None:
    """Seed Python, NumPy and torch and make torch use deterministic algorithms.

    Call it at the start of the training function; it can slow training down.
    """
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
