"""What a process forked from one that imported torch redoes (``TorchConfig.after_fork``, the fork
contract of docs/extending.md): torch's own internals are read here only, each guarded."""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Mapping

_destroyed_groups: list = []


def after_fork(loaded_env: Mapping[str, str]) -> None:
    follow_thread_count(loaded_env.get("OMP_NUM_THREADS", ""), os.environ.get("OMP_NUM_THREADS", ""))
    if (c10d := sys.modules.get("torch.distributed.distributed_c10d")) is not None:
        keep_destroyed_groups(c10d)


def follow_thread_count(loaded: str, wanted: str) -> None:
    """torch's intra-op pool as importing it with ``OMP_NUM_THREADS=wanted`` sizes it, where it was
    imported with ``loaded`` (Ray sets the variable per worker, after the fork), unless the user's
    code set its own."""
    import torch

    if loaded != wanted and loaded.isdigit() and wanted.isdigit() and torch.get_num_threads() == int(loaded):
        torch.set_num_threads(int(wanted))


def keep_destroyed_groups(c10d: Any) -> None:
    """Keep the process groups a forked script destroys until it exits, as a fresh process does.
    There, ``torch._dynamo``, imported lazily once the script's group exists (DDP imports it), keeps
    references to the group that outlive the script's ``main()``; preloaded, it keeps none, and a
    DDP model freed after ``destroy_process_group()`` is then the group's last holder: the group's
    destructor runs with the GIL held and joins a gloo thread that waits for the GIL (torch 2.13: a
    forked script hung in 10 of 100 two-rank runs beside four busy loops). The fork's exit skips the
    groups' teardown, as it skips the preloaded modules'. A torch whose c10d module differs (no
    ``destroy_process_group``, or no group map): left as it is."""
    destroy = getattr(c10d, "destroy_process_group", None)
    if destroy is None or getattr(destroy, "trainkit_keeps_groups", False):
        return

    @functools.wraps(destroy)
    def destroy_process_group(group: Any = None) -> None:
        every = group is None or group is getattr(getattr(c10d, "GroupMember", None), "WORLD", None)  # (torch: all)
        _destroyed_groups.extend(list(getattr(getattr(c10d, "_world", None), "pg_map", ())) if every else [group])
        destroy(group)

    destroy_process_group.trainkit_keeps_groups = True
    c10d.destroy_process_group = destroy_process_group
    if getattr(sys.modules.get("torch.distributed"), "destroy_process_group", None) is destroy:
        sys.modules["torch.distributed"].destroy_process_group = destroy_process_group
