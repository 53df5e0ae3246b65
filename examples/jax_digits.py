"""A plain-JAX MLP on scikit-learn's bundled digits, data-parallel across 2 CPU processes.

Every process holds half of the training rows. One device mesh spans both processes; each step
computes gradients on each device's rows and averages them with ``jax.lax.pmean`` inside
``shard_map``: a real cross-process all-reduce (gloo on CPUs), so every process applies the same
update and keeps identical parameters.

    python examples/jax_digits.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import trainkit
from trainkit_jax import JaxCheckpointIO, JaxTrainer

try:
    from jax import shard_map
except ImportError:  # JAX before 0.7
    from jax.experimental.shard_map import shard_map

CHECKPOINTS = JaxCheckpointIO()


def digits(part: str) -> tuple[np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    return (x_train, y_train) if part == "train" else (x_test, y_test)


def init_params(key: jax.Array) -> dict:
    k1, k2 = jax.random.split(key)
    return {"w1": jax.random.normal(k1, (64, 64)) * 0.1, "b1": jnp.zeros(64),
            "w2": jax.random.normal(k2, (64, 10)) * 0.1, "b2": jnp.zeros(10)}


def logits(params: dict, x: jax.Array) -> jax.Array:
    return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def loss_fn(params: dict, x: jax.Array, y: jax.Array) -> jax.Array:
    log_probs = jax.nn.log_softmax(logits(params, x))
    return -jnp.mean(jnp.take_along_axis(log_probs, y[:, None], axis=1))


def accuracy(params: dict, x: np.ndarray, y: np.ndarray) -> float:
    return float(jnp.mean(jnp.argmax(logits(params, jnp.asarray(x)), axis=1) == y))


def train_fn(config: dict) -> None:
    mesh = Mesh(np.array(jax.devices()), ("batch",))  # every process's devices
    replicated, by_rows = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("batch"))

    def local_step(params, x, y):  # runs on each device's rows
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, axis_name="batch")  # the cross-process all-reduce
        return jax.tree_util.tree_map(lambda p, g: p - config["lr"] * g, params, grads), \
            jax.lax.pmean(loss, axis_name="batch")

    step = jax.jit(shard_map(local_step, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec("batch"),
                                                              PartitionSpec("batch")),
                             out_specs=(PartitionSpec(), PartitionSpec())))

    def to_mesh(host_params):  # the same values on every process -> one replicated global array each
        return jax.tree_util.tree_map(
            lambda a: jax.make_array_from_callback(a.shape, replicated, lambda index: np.asarray(a)[index]),
            host_params)

    def to_host(global_params):
        return jax.tree_util.tree_map(lambda a: np.asarray(a.addressable_data(0)), global_params)

    x, y = digits("train")
    rows = len(x) // trainkit.get_context().get_world_size()  # the same count on every process
    x, y = trainkit.shard(x)[:rows], trainkit.shard(y)[:rows]  # this process's rows
    xs = jax.make_array_from_process_local_data(by_rows, x.astype(np.float32))
    ys = jax.make_array_from_process_local_data(by_rows, y)
    params, first_epoch = init_params(jax.random.PRNGKey(0)), 0
    if checkpoint := trainkit.get_checkpoint():
        state = CHECKPOINTS.load(checkpoint)
        params, first_epoch = state["params"], state["epoch"] + 1
    params = to_mesh(params)
    x_test, y_test = digits("test")
    for epoch in range(first_epoch, config["epochs"]):
        for _ in range(config["steps_per_epoch"]):
            params, loss = step(params, xs, ys)
        host = to_host(params)
        metrics = {"epoch": epoch, "loss": float(loss.addressable_data(0)),
                   "test_accuracy": accuracy(host, x_test, y_test),
                   "processes": jax.process_count(), "devices": jax.device_count()}
        CHECKPOINTS.report(metrics, {"params": host, "epoch": epoch})


def main() -> trainkit.Result:
    result = JaxTrainer(train_fn, train_loop_config={"lr": 0.5, "epochs": 5, "steps_per_epoch": 50},
                        scaling_config=trainkit.ScalingConfig(num_workers=2)).fit()
    print(f"processes: {result.metrics['processes']}, devices: {result.metrics['devices']}")
    print(f"held-out test accuracy: {result.metrics['test_accuracy']:.3f}")
    return result


if __name__ == "__main__":
    main()
