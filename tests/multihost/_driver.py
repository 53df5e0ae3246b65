"""The driver of a multi-host test, run on the head host (``ip netns exec <head> python _driver.py
CLUSTER_JSON SCENARIO OPTIONS_JSON``) with RAY_ADDRESS pointing at the head node, as a user runs one
on a real cluster. Prints one line, ``RESULT <json>``, for the test to check.
"""

import json
import os
import posixpath
import subprocess
import sys
import tempfile
import threading
import time

import trainkit
from trainkit import Checkpoint, DataParallelTrainer, FailureConfig, RunConfig, ScalingConfig

sys.path.insert(0, os.path.dirname(__file__))
from _hosts import Cluster  # noqa: E402


class Trace(trainkit.UserCallback):
    """Every consolidated report, all ranks' metrics."""

    def __init__(self):
        self.reports = []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append(metrics)


def node_ip() -> str:
    import ray

    return ray.util.get_node_ip_address()


def write_checkpoint(step: int, metrics: dict) -> None:
    """Every rank puts its own file in the step's checkpoint (so every host uploads to storage)."""
    rank = trainkit.get_context().get_world_rank()
    with tempfile.TemporaryDirectory() as directory:
        with open(os.path.join(directory, f"rank{rank}.json"), "w") as f:
            json.dump({"step": step, "ip": node_ip()}, f)
        trainkit.report(metrics, checkpoint=Checkpoint.from_directory(directory))


def resume() -> int:
    checkpoint = trainkit.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as directory:
        return json.load(open(os.path.join(directory, "rank0.json")))["step"] + 1


# -- torch DDP across hosts, checkpoints on the head host's S3 server --------------------------------

def ddp_fn(config):
    import torch
    import torch.distributed as dist

    import trainkit_torch

    rank = trainkit.get_context().get_world_rank()
    torch.manual_seed(0)
    model = trainkit_torch.prepare_model(torch.nn.Linear(8, 1))
    start = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own data: only the all-reduce
    for step in range(config["steps"]):                # keeps the replicas equal
        x = torch.randn(16, 8, generator=data)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        write_checkpoint(step, {"loss": loss.item()})
    params = [p.detach() for p in model.parameters()]
    trainkit.report({"ip": node_ip(), "master_addr": os.environ["MASTER_ADDR"], "backend": dist.get_backend(),
                     "params": torch.cat([p.flatten() for p in params]).tolist(),
                     "moved": max((p - s).abs().max().item() for p, s in zip(params, start))})


def ddp(cluster: Cluster, options: dict) -> dict:
    from trainkit_torch import TorchTrainer

    trace = Trace()
    result = TorchTrainer(ddp_fn, train_loop_config={"steps": 3},
                          scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                          run_config=RunConfig(name="ddp", storage_path=options["storage"], verbose=0,
                                               callbacks=[trace])).fit()
    checkpoint = result.checkpoint
    checkpoint.verify()  # every file against the manifest the driver wrote
    with checkpoint.as_directory() as directory:
        files = {name: json.load(open(os.path.join(directory, name))) for name in sorted(os.listdir(directory))
                 if name.startswith("rank")}
    return {"ranks": trace.reports[-1], "checkpoint": checkpoint.path, "files": files,
            "kept": len(result.best_checkpoints)}


# -- a node lost (its link cut) and regained: elastic num_workers=(1, 2) -----------------------------

def epochs_fn(config):
    context = trainkit.get_context()
    epoch = resume()
    while not os.path.exists(config["stop_file"]):
        time.sleep(0.3)  # a training step
        write_checkpoint(epoch, {"epoch": epoch, "world_size": context.get_world_size(), "ip": node_ip()})
        epoch += 1


class CutThenRestoreALink(trainkit.UserCallback):
    """At full size, unplugs the second host's cable; once the run goes on without it, plugs it back
    and restarts that host's Ray node (a node that was marked dead never rejoins: its raylet exits,
    as after a reboot on a real machine); once the run is back at full size, stops it."""

    def __init__(self, cluster: Cluster, stop_file: str):
        self.cluster, self.host, self.stop_file = cluster, cluster.hosts[1], stop_file
        self.trace, self.cut_at, self.restored, self.restore_error = [], None, None, None

    def after_report(self, run_context, metrics, checkpoint):
        epoch, size = metrics[0]["epoch"], metrics[0]["world_size"]
        self.trace.append((epoch, size, sorted({m["ip"] for m in metrics})))
        if size == 2 and self.cut_at is None and epoch >= 1:
            self.cut_at = epoch
            self.cluster.set_link(self.host, up=False)
        elif size == 1 and self.restored is None:
            self.restored = threading.Thread(target=self.restore)  # ray start takes seconds: not here
            self.restored.start()
        elif size == 2 and self.restored is not None and [s for _, s, _ in self.trace[-2:]] == [2, 2]:
            open(self.stop_file, "w").close()

    def restore(self):
        try:
            self.cluster.stop_host(self.host)
            self.cluster.set_link(self.host, up=True)
            self.cluster.start_ray(self.host)
        except Exception as exc:  # noqa: BLE001 - reported to the test, and the run stops
            self.restore_error = repr(exc)
            open(self.stop_file, "w").close()


def elastic(cluster: Cluster, options: dict) -> dict:
    callback = CutThenRestoreALink(cluster, options["stop_file"])
    result = DataParallelTrainer(
        epochs_fn, train_loop_config={"stop_file": options["stop_file"]},
        scaling_config=ScalingConfig(num_workers=(1, 2), resources_per_worker={"CPU": 1},
                                     elastic_resize_monitor_interval_s=1.0),
        run_config=RunConfig(name="elastic", storage_path=options["storage"], verbose=0, callbacks=[callback],
                             failure_config=FailureConfig(max_failures=2))).fit()
    with result.filesystem.open_input_stream(f"{result.path}/run_state.json") as f:
        world_sizes = json.load(f)["world_sizes"]
    return {"trace": callback.trace, "restore_error": callback.restore_error, "world_sizes": world_sizes,
            "final": result.metrics}


# -- a spot node reclaimed: drained with a deadline, then terminated, and replaced --------------------

def until_preempted_fn(config):
    """Steps until the run is preempted; at the notice a just-in-time checkpoint (every rank's file);
    the next attempt runs 3 steps from it."""
    context = trainkit.get_context()
    attempt, start = context.get_attempt(), resume()
    saved = False
    for step in range(start, start + (3 if attempt else 100_000)):
        metrics = {"step": step, "start": start, "attempt": attempt, "ip": node_ip()}
        info = trainkit.get_preemption_info()
        if info is not None and not saved:
            saved = True
            write_checkpoint(step, {**metrics, "jit": True, "noticed": time.time(), "deadline_ms": info.deadline_ms,
                                    "ranks": info.preempted_ranks, "nodes": info.preempted_node_ids})
            continue
        trainkit.report(metrics)
        time.sleep(0.05)


class DrainThenReclaim(trainkit.UserCallback):
    """At attempt 0's third report, drains the second host's node as the autoscaler does on a spot
    termination notice (``ray drain-node --reason=DRAIN_NODE_REASON_PREEMPTION`` with a deadline);
    once the just-in-time checkpoint committed, the host is terminated (every process killed) and a
    replacement joins (``ray start`` again)."""

    def __init__(self, cluster: Cluster, deadline_s: int):
        self.cluster, self.host, self.deadline_s = cluster, cluster.hosts[1], deadline_s
        self.trace, self.drain, self.jit, self.reclaimed, self.error = [], None, None, None, None

    def after_report(self, run_context, metrics, checkpoint):
        self.trace.append((run_context.attempt, metrics[0]["step"], sorted({m["ip"] for m in metrics})))
        if run_context.attempt == 0 and self.drain is None and metrics[0]["step"] >= 2:
            self.drain = {**self.drain_node(), "step": metrics[0]["step"]}
        if metrics[0].get("jit") and checkpoint is not None and self.jit is None:
            self.jit = {"committed": time.time(), "metrics": metrics}
            self.reclaimed = threading.Thread(target=self.reclaim)  # ray start takes seconds: not here
            self.reclaimed.start()

    def drain_node(self) -> dict:
        import ray

        node_id = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == self.host.ip)
        before = time.time()
        subprocess.run([os.path.join(os.path.dirname(self.cluster.python), "ray"), "drain-node",
                        f"--address={self.cluster.ray_address}", f"--node-id={node_id}",
                        "--reason=DRAIN_NODE_REASON_PREEMPTION", "--reason-message=spot termination notice",
                        f"--deadline-remaining-seconds={self.deadline_s}"], check=True, capture_output=True)
        return {"node_id": node_id, "before": before, "after": time.time()}

    def reclaim(self):
        try:
            self.cluster.stop_host(self.host)
            self.cluster.start_ray(self.host)
            self.jit["replaced"] = time.time()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            self.error = repr(exc)


def drain(cluster: Cluster, options: dict) -> dict:
    from trainkit._internal.worker import worker_group

    worker_group.PLACEMENT_TIMEOUT_S = 700  # the next attempt waits for the replacement host (the driver's limit: 800 s)
    callback = DrainThenReclaim(cluster, options["deadline_s"])
    result = DataParallelTrainer(
        until_preempted_fn, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name="drain", storage_path=options["storage"], verbose=0, callbacks=[callback],
                             failure_config=FailureConfig(max_failures=0))).fit()
    if callback.reclaimed is not None:
        callback.reclaimed.join()
    with result.filesystem.open_input_stream(f"{result.path}/run_state.json") as f:
        failures = json.load(f)["failures"]
    return {"trace": callback.trace, "drain": callback.drain, "jit": callback.jit, "error": callback.error,
            "failures": failures, "final": result.metrics, "ended": time.time()}
# -- a zombie: the far host partitioned off mid-upload, its rank finishing after attempt 1 committed --

HOLD_AT = 2  # the report whose upload rank 1 of attempt 0 is cut off in


def fence_fn(config):
    context = trainkit.get_context()
    rank, attempt, markers = context.get_world_rank(), context.get_attempt(), config["markers"]
    step = resume()
    while step < HOLD_AT + 3:
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, f"rank{rank}.json"), "w") as f:
                json.dump({"step": step, "attempt": attempt, "ip": node_ip()}, f)
            trainkit.report({"step": step, "attempt": attempt}, checkpoint=Checkpoint.from_directory(directory))
        if attempt == 0 and step == HOLD_AT:
            if rank == 1:  # the zombie: its upload was held until attempt 1 committed this report
                open(os.path.join(markers, "zombie-done"), "w").close()
            while True:  # the attempt ends around it (rank 1's node is lost); nothing more of it
                time.sleep(0.2)
        if attempt == 1 and step == HOLD_AT + 1:  # report HOLD_AT committed, the zombie released
            while not os.path.exists(os.path.join(markers, "zombie-done")):
                time.sleep(0.1)
        step += 1


def stray(storage) -> list[str]:
    """Files of the run no manifest names: temporary ones, or in an attempt folder no manifest names."""
    import pyarrow.fs as pafs

    from trainkit._internal.storage.checkpoint_files import read_manifest

    found = []
    for info in storage.fs.get_file_info(pafs.FileSelector(storage.run_path, recursive=True)):
        top, _, rest = posixpath.relpath(info.path, storage.run_path).partition("/")
        folder = rest.split("/")[0]
        if info.type == pafs.FileType.File and (top.startswith(".tmp-") or folder.startswith(".attempt-") and
                                                folder != (read_manifest(storage.fs, storage.path(top)) or {}).get("data")):
            found.append(posixpath.relpath(info.path, storage.run_path))
    return found


class Partition(trainkit.UserCallback):
    """Once rank 1 of attempt 0 holds in its upload, partitions its host off the head (S3 stays
    reachable); releases the upload once attempt 1 has committed that report; once the zombie is
    done, notes what it left (the end of the run sweeps it)."""

    def __init__(self, cluster: Cluster, markers: str, storage):
        self.cluster, self.markers, self.storage, self.cut_error = cluster, markers, storage, None
        self.zombie_files: list[str] = []
        self.started, self.events = time.time(), []  # (s since the fit started, what happened)
        self.thread = threading.Thread(target=self.cut, daemon=True)
        self.thread.start()

    def cut(self):
        try:
            while not os.path.exists(os.path.join(self.markers, "held")):
                time.sleep(0.05)
            self.cluster.set_partition(self.cluster.hosts[1], cut=True)
            self.event("cut")
        except Exception as exc:  # noqa: BLE001 - reported to the test
            self.cut_error = repr(exc)

    def event(self, what: str) -> None:
        self.events.append((round(time.time() - self.started, 2), what))

    def after_report(self, run_context, metrics, checkpoint):
        self.event(f"report {metrics[0]}" + (" committed" if checkpoint is not None else ""))
        if metrics[0] == {"step": HOLD_AT, "attempt": 1} and checkpoint is not None:
            open(os.path.join(self.markers, "release"), "w").close()
            self.event("released")
        if metrics[0] == {"step": HOLD_AT + 2, "attempt": 1}:  # its ranks saw zombie-done before this
            self.zombie_files = stray(self.storage)


def fence(cluster: Cluster, options: dict) -> dict:
    from trainkit._internal.storage.run_storage import RunStorage

    markers = options["markers"]
    os.environ.update(TRAINKIT_FAULT_POINT=f"before_upload_file:rank=1:attempt=0:index={HOLD_AT}",
                      TRAINKIT_FAULT_HOLD=markers)  # forwarded to the workers
    name = f"fence-{time.time_ns()}"
    storage = RunStorage(options["storage"], name)
    partition = Partition(cluster, markers, storage)
    try:
        result = DataParallelTrainer(
            fence_fn, train_loop_config={"markers": markers},
            scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}, placement_strategy="SPREAD"),
            run_config=RunConfig(name=name, storage_path=options["storage"], verbose=0, callbacks=[partition],
                                 failure_config=FailureConfig(max_failures=2))).fit()
    finally:
        cluster.set_partition(cluster.hosts[1], cut=False)
        cluster.stop_host(cluster.hosts[1])  # Ray marked the node dead: it rejoins as a new one
        cluster.start_ray(cluster.hosts[1])
    with result.filesystem.open_input_stream(f"{result.path}/run_state.json") as f:
        state = json.load(f)
    checkpoints = {}
    for record in state["checkpoints"]:
        checkpoint = Checkpoint(f"{result.path}/{record['name']}", result.filesystem)
        checkpoint.verify()  # every file against the manifest the driver wrote
        with checkpoint.as_directory() as directory:
            checkpoints[record["name"]] = {name: json.load(open(os.path.join(directory, name)))
                                           for name in sorted(os.listdir(directory)) if name.startswith("rank")}
    return {"failures": state["failures"], "checkpoints": checkpoints, "cut_error": partition.cut_error,
            "zombie_done": os.path.exists(os.path.join(markers, "zombie-done")),
            "zombie_files": partition.zombie_files, "left": stray(storage),  # swept by the end of the run
            "events": sorted(partition.events + [(round(f["time"] - partition.started, 2), f"attempt {f['attempt']} failed")
                                                 for f in state["failures"]])}


# -- steps/s with and without link latency (tc netem, or the NFQUEUE delayer) -------------------

def steps_fn(config):
    for step in range(config["warmup"]):
        trainkit.report({"step": step})
    start = time.perf_counter()
    for step in range(config["steps"]):
        time.sleep(config["step_s"])  # a training step that needs no network
        trainkit.report({"step": step})
    trainkit.report({"steps_per_s": config["steps"] / (time.perf_counter() - start), "ip": node_ip()})


def steps_per_s(options: dict) -> list[dict]:
    trace = Trace()
    DataParallelTrainer(steps_fn, train_loop_config={"warmup": 5, "steps": options["steps"], "step_s": 0.01},
                        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 1}),
                        run_config=RunConfig(name=f"steps-{time.time_ns()}", storage_path=options["storage"],
                                             verbose=0, callbacks=[trace])).fit()
    return trace.reports[-1]


def latency(cluster: Cluster, options: dict) -> dict:
    plain = steps_per_s(options)
    plain_rtt_ms = cluster.round_trip_ms(cluster.hosts[1])
    try:
        way = cluster.set_delay(options["delay_ms"])
        rtt_ms = cluster.round_trip_ms(cluster.hosts[1])
        delayed = steps_per_s(options)
    finally:
        cluster.set_delay(0)
    return {"plain": plain, "delayed": delayed, "plain_rtt_ms": plain_rtt_ms, "rtt_ms": rtt_ms, "way": way}


if __name__ == "__main__":
    cluster = Cluster.load(sys.argv[1])
    scenario, options = sys.argv[2], json.loads(sys.argv[3])
    print("RESULT " + json.dumps({"ddp": ddp, "elastic": elastic, "drain": drain, "fence": fence, "latency": latency}[scenario](cluster, options)),
          flush=True)
