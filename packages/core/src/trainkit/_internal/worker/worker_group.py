"""A group of worker actors in one placement group, with ranks assigned node by node: the
implementation of ``trainkit.backend.WorkerGroup``."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from trainkit._internal.cluster import net, ray_runtime, tpu
from trainkit._internal.cluster.reservation import reserved_bundles
from trainkit._internal.worker import runtime_env as runtime_envs
from trainkit._internal.worker import spare
from trainkit._internal.worker.actor import DRIVER_CWD, actor_options, start_actor
from trainkit._internal.worker.context_types import TrainContext
from trainkit.backend import Rendezvous, WorkerInfo
from trainkit.config import ScalingConfig
from trainkit.errors import PlacementError

PLACEMENT_TIMEOUT_S = float(os.environ.get("TRAINKIT_PLACEMENT_TIMEOUT_S", "60"))
# (what it holds, the placement group) of a failed attempt whose run may restart: its restart takes
# it as it is. A new placement group waits for Ray to return the old one's resources (0.5-0.9 s here).
_kept_placement: tuple[tuple, Any] | None = None


def release_kept_placement() -> None:
    """Remove the placement group a failed attempt kept for a restart that did not come."""
    _take_kept_placement(None)


def _take_kept_placement(key: tuple | None) -> Any:
    """The kept placement group when it holds ``key``'s bundles; any other is removed."""
    global _kept_placement
    kept, _kept_placement = _kept_placement, None
    if kept is None:
        return None
    if kept[0] == key:
        return kept[1]
    import ray
    from ray.util.placement_group import remove_placement_group

    if ray.is_initialized():  # else it went with its cluster
        remove_placement_group(kept[1])
    return None


class WorkerGroup:
    """Workers of one attempt (``trainkit.backend.WorkerGroup`` says what a backend may call)."""

    def __init__(self, workers: list[WorkerInfo], placement_group: Any, marks: dict[str, float],
                 spare_shape: spare.Shape | None = None, placement_key: tuple | None = None,
                 runtime_env: dict[str, Any] | None = None):
        self.workers = workers
        self._placement_group = placement_group
        self._placement_key = placement_key  # what the placement group holds (see _kept_placement)
        self.marks = marks  # when placement, actor start and setup ended (time.monotonic())
        self._spare_shape = spare_shape  # of the workers to prestart for the next group
        self._runtime_env = runtime_env  # the workers' (runtime_env.for_workers), and their spares'

    @classmethod
    def start(cls, scaling: ScalingConfig, num_workers: int, *, run_name: str, attempt: int,
              storage: Any, env: dict[str, str] | None = None, prewarm_modules: tuple[str, ...] = (),
              placement_timeout_s: float | None = None, avoid_nodes: frozenset[str] = frozenset(),
              runtime_env: dict[str, Any] | None = None) -> "WorkerGroup":
        """``num_workers`` actors, placed within ``placement_timeout_s`` (default
        ``TRAINKIT_PLACEMENT_TIMEOUT_S``, 60 s) or PlacementError; none on ``avoid_nodes`` (unless the
        user's ``label_selector`` names nodes itself, or a Tune trial's reservation is placed already).
        ``runtime_env``: the actors' Ray runtime_env (``runtime_env.for_workers``, uploaded already)."""
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        timeout_s = placement_timeout_s or PLACEMENT_TIMEOUT_S
        resources = scaling.worker_resources
        shape, per_slice = scaling.tpu_slice, scaling.workers_per_slice
        slice_names, claims = [], []
        if shape and shape.hosts > 1:  # a multi-host TPU slice is only usable whole: claim slices first
            try:
                host_needs = {k: v * per_slice / shape.hosts for k, v in resources.items()}
                slice_names, claims = tpu.claim_slices(shape, num_workers // per_slice, host_needs, timeout_s)
            except TimeoutError as exc:
                raise PlacementError(f"could not place {num_workers} workers on whole TPU slices: {exc}. "
                                     "Lower num_workers or free a slice.") from None
        selectors = [{**(scaling.label_selector or {}), **({tpu.SLICE_NAME: slice_names[i // per_slice]}
                                                          if slice_names else {})} for i in range(num_workers)]
        reserved = None if slice_names or any(selectors) else reserved_bundles(num_workers, resources)
        try:
            from ray.util.placement_group import NODE_ID_LABEL_KEY as node_id_label
        except ImportError:  # a Ray release without node label selectors: a restart may land on the node avoided
            node_id_label = None
        avoided = sorted(avoid_nodes) if node_id_label and not reserved \
            and not any(node_id_label in s for s in selectors) else []
        if avoided:
            selectors = [{**s, node_id_label: f"!in({','.join(avoided)})"} for s in selectors]
        key = None if reserved or any(selectors) else (num_workers, tuple(sorted(resources.items())),
                                                       scaling.placement_strategy)
        pg = reserved.placement_group if reserved else _take_kept_placement(key) or placement_group(
            [resources] * num_workers, strategy=scaling.placement_strategy,
            **({"bundle_label_selector": selectors} if any(selectors) else {}))
        first_bundle = reserved.first_bundle if reserved else 0
        marks: dict[str, float] = {}
        try:
            ray.get(pg.ready(), timeout=timeout_s)
            marks["placement"] = time.monotonic()
        except ray.exceptions.GetTimeoutError:
            if not reserved:  # a trial's reservation stays the trial's
                remove_placement_group(pg)
            raise PlacementError(
                f"could not place {num_workers} workers with {resources} each "
                f"({scaling.placement_strategy}) within {timeout_s:.0f} s; the cluster has "
                f"{ray.available_resources()} available"
                + (f"; left out: node(s) {', '.join(n[:12] for n in avoided)}, where a rank of the last attempt "
                   "stopped answering" if avoided else "") + ". Lower num_workers or resources_per_worker."
            ) from None
        finally:
            for claim in claims:  # the workers' bundles now hold the slices
                remove_placement_group(claim)
        spare_shape = None if reserved or any(selectors) else spare.shape(num_workers, resources, prewarm_modules,
                                                                         runtime_envs.key(runtime_env))
        options = actor_options(resources, runtime_env)
        actors = spare.take(spare_shape) or []
        if not actors and ray_runtime.attached_cluster() and not (reserved or any(selectors) or runtime_env) \
                and spare.fits(resources):  # a runtime plugin's spares (trainkit-warm's keeper's)
            from trainkit._internal.plugins import get_plugins

            actors = get_plugins().hook.trainkit_claim_workers(count=num_workers, prewarm_modules=prewarm_modules) or []
        actors += [
            start_actor(prewarm_modules, **options, scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=first_bundle + i))
            for i in range(len(actors), num_workers)
        ]
        try:
            infos = ray.get([a.node_info.remote() for a in actors])
            marks["actors"] = time.monotonic()
            driver_node = ray.get_runtime_context().get_node_id()
            workers = _assign_ranks(actors, infos, lambda info, i: tpu.rank_order(info, slice_names) if slice_names
                                    else (info["node_id"] != driver_node, i))
            group = cls(workers, None if reserved else pg, marks, spare_shape, key, runtime_env)  # a trial's reservation stays the trial's
            num_slices = num_workers // per_slice if scaling.use_tpu else 1
            cwd = {DRIVER_CWD: os.getcwd()} if ray_runtime.attached_cluster() else {}
            ray.get([
                w.actor.setup.remote(
                    TrainContext(world_rank=w.world_rank, world_size=num_workers, local_rank=w.local_rank,
                                 local_world_size=w.local_world_size, node_rank=w.node_rank,
                                 experiment_name=run_name, attempt=attempt, storage=storage),
                    {**(env or {}), "TRAINKIT_RANK": str(w.world_rank), **cwd,
                     **(tpu.multislice_env(workers[0].ip, num_slices, w.world_rank // per_slice)
                        if num_slices > 1 else {})},
                    driver_node,
                )
                for w in workers
            ])
            marks["setup"] = time.monotonic()
        except BaseException:
            for a in actors:
                ray.kill(a, no_restart=True)
            if not reserved:
                remove_placement_group(pg)
            raise
        return group

    def __len__(self) -> int:
        return len(self.workers)

    # -- the driver's calls to its ranks: no other module calls a worker actor --------------------
    def call(self, rank: int, method: str, *args: Any) -> Any:
        """``Worker.<method>(*args)`` on ``rank``'s actor, not waited for: its ``ObjectRef``."""
        return getattr(self.workers[rank].actor, method).remote(*args)

    def call_each(self, method: str, *args: Any, ranks: Iterable[int] | None = None) -> dict[Any, int]:
        """``call`` on each of ``ranks`` (default: all): each ``ObjectRef`` to its rank."""
        ranks = range(len(self.workers)) if ranks is None else ranks
        return {self.call(rank, method, *args): rank for rank in ranks}

    def execute_async(self, fn: Callable, *args: Any, **kwargs: Any) -> list[Any]:
        return [w.actor.execute.remote(fn, *args, **kwargs) for w in self.workers]

    def execute(self, fn: Callable, *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``fn(*args, **kwargs)`` on every rank in parallel; results in rank order."""
        import ray

        return ray.get(self.execute_async(fn, *args, **kwargs))

    def execute_single(self, rank: int, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        import ray

        return ray.get(self.workers[rank].actor.execute.remote(fn, *args, **kwargs))

    def execute_per_rank(self, fn: Callable, args_per_rank: Sequence[Sequence[Any]]) -> list[Any]:
        """``fn(*args_per_rank[r])`` on every rank r in parallel; results in rank order."""
        import ray

        if len(args_per_rank) != len(self.workers):
            raise ValueError(f"execute_per_rank got {len(args_per_rank)} argument tuples for "
                             f"{len(self.workers)} ranks: expected one per rank")
        return ray.get([w.actor.execute.remote(fn, *args) for w, args in zip(self.workers, args_per_rank)])

    def set_env(self, env: Mapping[str, str] | Sequence[Mapping[str, str]]) -> None:
        """Set variables on every rank (one mapping, or one per rank); undone at ``shutdown``."""
        per_rank = [env] * len(self.workers) if isinstance(env, Mapping) else list(env)
        if len(per_rank) != len(self.workers):
            raise ValueError(f"set_env got {len(per_rank)} mappings for {len(self.workers)} ranks: "
                             "expected one for every rank, or one per rank")
        for mapping in per_rank:
            bad = {k: v for k, v in mapping.items() if not (isinstance(k, str) and isinstance(v, str))}
            if bad:
                raise TypeError(f"set_env: environment variables are str to str, got {bad!r}")
        self.execute_per_rank(_set_env, [(dict(mapping),) for mapping in per_rank])

    def restore_env(self, timeout_s: float | None = None) -> None:
        """Undo ``set_env`` on every rank (``shutdown`` does, after the backend's ``on_shutdown``)."""
        import ray

        ray.get(self.execute_async(_restore_env), timeout=timeout_s)

    def rendezvous(self, listen: bool = False) -> list[Rendezvous]:
        """Every rank's ranks and sizes, with rank 0's node address and a port there: bound and held
        by rank 0's worker with ``listen`` (``backend.take_listening_socket``), else free now."""
        if listen:
            addr, port = self.execute_single(0, net.listen_on_node, self._single_node())
        else:
            addr, port = self.free_address(0)
        num_nodes = len({w.node_rank for w in self.workers})
        return [Rendezvous(addr, port, w.world_rank, len(self.workers), w.local_rank, w.local_world_size,
                           w.node_rank, num_nodes) for w in self.workers]

    def node_address(self, rank: int = 0) -> str:
        """The host other ranks reach ``rank``'s node at: 127.0.0.1 when the whole group is on one node."""
        return "127.0.0.1" if self._single_node() else self.workers[rank].ip

    def free_address(self, rank: int = 0, hold: bool = False) -> tuple[str, int]:
        """A host other ranks reach ``rank``'s node at, and a TCP port there, for a framework's
        rendezvous: 127.0.0.1 when the whole group is on one node (nothing listens beyond
        loopback), else that node's IP. The port is free now, or with ``hold`` held by rank's
        worker until ``backend.release_port`` there or the worker's end (``net.hold_ports``)."""
        host, (port,) = self.execute_single(rank, net.host_and_ports, self._single_node(), 1, hold)
        return host, port

    def free_ports(self, count: int = 1, hold: bool = False) -> list[tuple[str, list[int]]]:
        """For every rank, in rank order: the host other ranks reach it at and ``count`` TCP ports
        there (free now, or held as in ``free_address``), no port offered twice on one host (for
        frameworks where every worker listens, e.g. LightGBM, TF_CONFIG)."""
        for _ in range(5):  # ranks on one node may, rarely, be offered the same free port
            offers = [(host, list(ports))
                      for host, ports in self.execute(net.host_and_ports, self._single_node(), count, hold)]
            taken = [(host, port) for host, ports in offers for port in ports]
            if len(set(taken)) == len(taken):
                return offers
        raise RuntimeError(f"could not find {count} distinct free ports per worker after 5 tries")

    def _single_node(self) -> bool:
        return len({w.node_id for w in self.workers}) == 1

    def shutdown(self, graceful: bool, timeout_s: float = 10.0, keep_placement: bool = False) -> None:
        """Stop every worker (running stop hooks first when ``graceful``) and free the placement group,
        or keep it for the next group of the same shape (``keep_placement``: a restart follows)."""
        global _kept_placement
        import ray
        from ray.util.placement_group import remove_placement_group

        if graceful:
            try:
                self.restore_env(timeout_s)
                ray.get([w.actor.stop.remote() for w in self.workers], timeout=timeout_s)
            except Exception:  # noqa: BLE001 - teardown goes on regardless
                pass
        for w in self.workers:
            ray.kill(w.actor, no_restart=True)
        if self._placement_group is not None and keep_placement and self._placement_key is not None:
            _take_kept_placement(None)
            _kept_placement = (self._placement_key, self._placement_group)
        elif self._placement_group is not None:
            remove_placement_group(self._placement_group)
        self.prestart_next()

    def prestart_next(self) -> None:
        """Prestart the workers of the next group of this shape (the next attempt, the next fit)."""
        spare.prestart(self._spare_shape,
                       lambda modules: start_actor(modules, **actor_options({}, self._runtime_env)))


def _assign_ranks(actors: list[Any], infos: list[dict], node_key: Callable[[dict, int], Any]) -> list[WorkerInfo]:
    """Ranks contiguous per node, nodes sorted by ``node_key(info, placement index)`` of their first
    worker (the driver's node first, or TPU hosts in slice order)."""
    keys: dict[str, Any] = {}
    for i, info in enumerate(infos):
        keys.setdefault(info["node_id"], node_key(info, i))
    node_order = sorted(keys, key=keys.__getitem__)
    ordered = sorted(zip(actors, infos), key=lambda ai: node_order.index(ai[1]["node_id"]))
    sizes = {n: sum(info["node_id"] == n for info in infos) for n in node_order}
    workers, local = [], {n: 0 for n in node_order}
    for rank, (actor, info) in enumerate(ordered):
        node = info["node_id"]
        workers.append(WorkerInfo(actor, rank, local[node], sizes[node], node_order.index(node), node, info["ip"],
                                  info["pid"], info["accelerator_ids"]))
        local[node] += 1
    return workers


_env_before: dict[str, str | None] = {}  # in a worker process: what set_env replaced, for _restore_env


def _set_env(env: dict[str, str]) -> None:
    for key in env:
        _env_before.setdefault(key, os.environ.get(key))
    os.environ.update(env)


def _restore_env() -> None:
    for key, value in _env_before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _env_before.clear()
