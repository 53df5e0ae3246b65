"""JAX across 2 real trainkit workers: one device mesh over both processes, collectives across them."""

import collections

import numpy as np
import pytest

import trainkit
from trainkit import FailureConfig, ScalingConfig, collective
from trainkit_jax import JaxCheckpointIO, JaxConfig, JaxTrainer, restore


class Recorder(trainkit.UserCallback):
    def __init__(self):
        self.reports = []

    def after_report(self, run_context, metrics, checkpoint):
        self.reports.append((run_context.attempt, metrics))


def mesh_and_shard_map():
    import jax
    from jax.sharding import Mesh

    try:
        from jax import shard_map
    except ImportError:  # JAX before 0.7
        from jax.experimental.shard_map import shard_map
    return Mesh(np.array(jax.devices()), ("i",)), shard_map


def psum_fn():
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh, shard_map = mesh_and_shard_map()
    rank = trainkit.get_context().get_world_rank()
    local = np.full((jax.local_device_count(),), rank + 1.0, dtype=np.float32)
    values = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), local)
    total = jax.jit(shard_map(lambda x: jax.lax.psum(x, "i"), mesh=mesh, in_specs=P("i"), out_specs=P()))(values)
    trainkit.report({"process_index": jax.process_index(), "process_count": jax.process_count(),
                     "device_count": jax.device_count(), "psum": float(total.addressable_data(0)[0])})


def test_devices_span_processes_and_psum_crosses_them(ray_cluster, run_config):
    recorder = Recorder()
    JaxTrainer(psum_fn, scaling_config=ScalingConfig(num_workers=2), run_config=run_config(callbacks=[recorder])).fit()
    (_, metrics), = recorder.reports
    assert [m["process_index"] for m in metrics] == [0, 1]  # JAX's process ids are trainkit's ranks
    assert all(m["process_count"] == 2 and m["device_count"] == 2 for m in metrics)
    assert [m["psum"] for m in metrics] == [3.0, 3.0]  # 1 + 2, summed across processes


def regression_fn(config):
    """Linear regression, data-parallel: gradients pmean-ed across processes; fails once at epoch 2."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    mesh, shard_map = mesh_and_shard_map()
    context = trainkit.get_context()
    rows = np.random.default_rng(context.get_world_rank()).normal(size=(64, 3)).astype(np.float32)
    xs = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), rows)
    ys = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), rows @ np.array([1.0, -2.0, 0.5], np.float32))

    def local_step(w, x, y):
        loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
        return w - 0.1 * jax.lax.pmean(grad, "i"), jax.lax.pmean(loss, "i")

    step = jax.jit(shard_map(local_step, mesh=mesh, in_specs=(P(), P("i"), P("i")), out_specs=(P(), P())))
    io, w, first = JaxCheckpointIO(), np.zeros(3, np.float32), 0
    if checkpoint := trainkit.get_checkpoint():
        state = io.load(checkpoint)
        w, first = np.asarray(state["w"]), state["epoch"] + 1
    w = jax.make_array_from_callback(w.shape, NamedSharding(mesh, P()), lambda index: w[index])
    for epoch in range(first, 4):
        if epoch == 2 and context.get_attempt() == 0:
            collective.barrier()  # epoch 1's report returned on every rank: it commits
            if context.get_world_rank() == 1:
                raise RuntimeError("injected failure")
        for _ in range(10):
            w, loss = step(w, xs, ys)
        host = np.asarray(w.addressable_data(0))
        io.report({"epoch": epoch, "loss": float(loss.addressable_data(0)), "w": host.tolist()},
                  {"w": w, "epoch": epoch})


def test_data_parallel_training_converges_and_resumes_after_a_failure(ray_cluster, run_config):
    recorder = Recorder()
    JaxTrainer(regression_fn, scaling_config=ScalingConfig(num_workers=2),
               run_config=run_config(callbacks=[recorder], failure_config=FailureConfig(max_failures=1))).fit()
    assert [(attempt, metrics[0]["epoch"]) for attempt, metrics in recorder.reports] == [(0, 0), (0, 1), (1, 2), (1, 3)]
    for _, metrics in recorder.reports:
        assert metrics[0]["w"] == metrics[1]["w"]  # the all-reduced gradients kept the replicas identical
    losses = [metrics[0]["loss"] for _, metrics in recorder.reports]
    assert losses == sorted(losses, reverse=True) and losses[-1] < 0.1 * losses[0]  # resumed, not restarted
    assert np.allclose(recorder.reports[-1][1][0]["w"], [1.0, -2.0, 0.5], atol=0.1)


def test_config_and_checkpoint_errors_name_what_is_allowed(tmp_path):
    with pytest.raises(ValueError, match="platform='metal' is invalid"):
        JaxConfig(platform="metal")
    with pytest.raises(TypeError, match="cannot save a object"):
        JaxCheckpointIO().save({"x": object()}, str(tmp_path))


def test_restore_puts_leaves_back_into_the_template(tmp_path):
    import jax.numpy as jnp

    State = collections.namedtuple("State", "count mu")
    template = {"opt": State(jnp.array(0), {"w": jnp.zeros(2)})}
    io = JaxCheckpointIO()
    io.save({"opt": State(jnp.array(5), {"w": jnp.ones(2)})}, str(tmp_path))
    restored = restore(template, io.load_from_directory(str(tmp_path)))
    assert isinstance(restored["opt"], State) and int(restored["opt"].count) == 5
    assert np.array_equal(restored["opt"].mu["w"], np.ones(2))


def test_gpu_workers_ask_jax_for_the_gpu_platform_its_installed_plugin_drives(tmp_path, monkeypatch):
    """JAX expands jax_platforms="gpu" to every GPU platform it knows and fails on a missing one
    (seen on an H200 with jax 0.11: "Unable to initialize backend 'rocm'"): the worker names the
    platform of the plugin that is installed."""
    from trainkit_jax.backend import _gpu_platform

    dist_info = tmp_path / "jax_cuda13_plugin-0.11.2.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: jax-cuda13-plugin\nVersion: 0.11.2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _gpu_platform() == "cuda"
