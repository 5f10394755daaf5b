"""What a checkpoint stores of a job's state: arrays Orbax can write, host arrays apart from
the JSON, and the checksums a restore compares (`rl.checkpoint.persistent`).

    stored = storable(state)                   # typed PRNG keys -> their key data
    skeleton, arrays = split_host(host)        # NumPy arrays out of the JSON host state
    sums = checksums(state)                    # one uint32 per array: any changed bit
"""

from __future__ import annotations

import hashlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from models import multihost

ARRAY_KEY = "__array__"


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def storable(tree: Any) -> Any:
    """`tree` with typed PRNG keys replaced by their uint32 key data (what Orbax and
    host copies hold)."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def unstorable(tree: Any, template: Any) -> Any:
    """Inverse of `storable`: wraps key data back into keys where `template` has keys."""
    return jax.tree.map(lambda x, t: jax.random.wrap_key_data(x, impl=jax.random.key_impl(t))
                        if _is_key(t) else x, tree, template)


def abstract(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of `storable(tree)`: Orbax's restore target."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
                        storable(tree))


def split_host(host: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """(the host state with each NumPy array replaced by {ARRAY_KEY: key}, {key: array})."""
    arrays: dict[str, np.ndarray] = {}

    def walk(x):
        if isinstance(x, np.ndarray):
            key = str(len(arrays))
            arrays[key] = x
            return {ARRAY_KEY: key}
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v) for v in x]
        return x

    return walk(host), arrays


def join_host(skeleton: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Inverse of `split_host`."""
    if isinstance(skeleton, dict):
        if set(skeleton) == {ARRAY_KEY}:
            return np.asarray(arrays[skeleton[ARRAY_KEY]])
        return {k: join_host(v, arrays) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [join_host(v, arrays) for v in skeleton]
    return skeleton


def host_checksums(arrays: dict[str, np.ndarray]) -> dict[str, str]:
    """A SHA-256 prefix of each host array's dtype, shape and bytes."""
    return {k: hashlib.sha256(f"{a.dtype}{a.shape}".encode()
                              + np.ascontiguousarray(a).tobytes()).hexdigest()[:16]
            for k, a in arrays.items()}


def _leaf_checksum(x: jax.Array) -> jax.Array:
    """uint32 position-weighted sum of a leaf's bits (wraps around)."""
    if x.dtype == jnp.bool_:
        bits = x.astype(jnp.uint32)
    elif x.dtype in (jnp.int4, jnp.uint4):  # 4-bit codes (models.quant): their values
        bits = x.astype(jnp.int32).astype(jnp.uint32)
    else:
        width = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[x.dtype.itemsize]
        bits = jax.lax.bitcast_convert_type(x, width).astype(jnp.uint32)
    bits = bits.reshape(-1)
    weights = jnp.arange(bits.size, dtype=jnp.uint32) * jnp.uint32(2654435761) + jnp.uint32(1)
    return jnp.sum(bits * weights, dtype=jnp.uint32)


_checksums = jax.jit(lambda tree: [_leaf_checksum(x) for x in jax.tree.leaves(tree)])


def checksums(tree: Any) -> list[int]:
    """One uint32 per array leaf of `storable(tree)`: detects any changed bit."""
    return [int(c) for c in multihost.to_host(_checksums(storable(tree)))]
