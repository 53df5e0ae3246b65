"""``JaxCheckpointIO``: JAX pytrees in trainkit checkpoints, as NumPy arrays plus a JSON skeleton.

The format (documented, no pickle): ``arrays.npz`` holds every array leaf as ``leaf_<i>``, loaded
with ``allow_pickle=False``; ``tree.json`` holds the containers (dicts with string keys, lists,
tuples, None) and the plain leaves (numbers, strings, bools), an array leaf standing as
``{"__array__": i}``. Other pytree nodes (e.g. optax states, which are named tuples) are saved as
their tuple; ``restore(template, loaded)`` puts the leaves back into the template's structure.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from trainkit import CheckpointIO

ARRAYS, TREE = "arrays.npz", "tree.json"


class JaxCheckpointIO(CheckpointIO):
    """Example::

        io = JaxCheckpointIO()
        io.report({"loss": loss}, {"params": params, "step": step})    # rank 0 saves, every rank reports
        state = io.load(trainkit.get_checkpoint())                     # verified, then loaded

    Arrays must be addressable from the saving process (host-local, or replicated across
    processes as data-parallel parameters are); gather sharded ones first (e.g. with
    ``jax.experimental.multihost_utils.process_allgather`` on every rank).
    """

    def save(self, state: Any, directory: str) -> None:
        import numpy as np

        arrays: list[Any] = []
        skeleton = _skeleton(state, arrays)
        np.savez(os.path.join(directory, ARRAYS), **{f"leaf_{i}": a for i, a in enumerate(arrays)})
        with open(os.path.join(directory, TREE), "w") as f:
            json.dump(skeleton, f)

    def load_from_directory(self, directory: str) -> Any:
        import jax.numpy as jnp
        import numpy as np

        with np.load(os.path.join(directory, ARRAYS), allow_pickle=False) as npz:
            arrays = [jnp.asarray(npz[f"leaf_{i}"]) for i in range(len(npz.files))]
        with open(os.path.join(directory, TREE)) as f:
            return _rebuild(json.load(f), arrays)


def restore(template: Any, loaded: Any) -> Any:
    """``loaded``'s leaves in ``template``'s pytree structure (e.g. an optax state's named tuples)."""
    import jax

    leaves = jax.tree_util.tree_leaves(loaded)
    structure = jax.tree_util.tree_structure(template)
    if structure.num_leaves != len(leaves):
        raise ValueError(f"the checkpoint holds {len(leaves)} leaves, the template {structure.num_leaves}")
    return jax.tree_util.tree_unflatten(structure, leaves)


def _skeleton(node: Any, arrays: list[Any]) -> Any:
    import numpy as np

    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, Mapping):
        if not all(isinstance(k, str) for k in node):
            raise TypeError(f"JaxCheckpointIO saves dicts with string keys, got keys {list(node)[:5]}")
        return {"__dict__": {k: _skeleton(v, arrays) for k, v in node.items()}}
    if isinstance(node, (list, tuple)):
        return {"__list__" if isinstance(node, list) else "__tuple__": [_skeleton(v, arrays) for v in node]}
    if hasattr(node, "shape") and hasattr(node, "dtype"):  # a jax.Array or a NumPy array
        if hasattr(node, "is_fully_addressable") and not node.is_fully_addressable:
            if not node.is_fully_replicated:
                raise ValueError("JaxCheckpointIO got an array sharded across processes: gather it on every rank "
                                 "first (jax.experimental.multihost_utils.process_allgather)")
            node = node.addressable_data(0)
        arrays.append(np.asarray(node))
        return {"__array__": len(arrays) - 1}
    raise TypeError(f"JaxCheckpointIO cannot save a {type(node).__name__}: use dicts, lists, tuples, numbers and "
                    "arrays (other pytree nodes: save jax.tree_util.tree_leaves(x), then restore(template, loaded))")


def _rebuild(node: Any, arrays: list[Any]) -> Any:
    if not isinstance(node, dict):
        return node
    (kind, value), = node.items()
    if kind == "__array__":
        return arrays[value]
    if kind == "__dict__":
        return {k: _rebuild(v, arrays) for k, v in value.items()}
    items = [_rebuild(v, arrays) for v in value]
    return items if kind == "__list__" else tuple(items)
