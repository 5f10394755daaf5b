"""Host-side views of device arrays that also work when the arrays span processes.

With JAX's multi-controller runtime every process runs the same program on
global arrays, and a process can only read the shards on its own devices:
`np.asarray` fails on an array split over several processes. These helpers
are what the sampler, the trainer and the entry points use instead:

    host = to_host(tree)              # numpy copies of the whole (global) arrays
    if is_primary(): write(...)       # one process writes files and the console
    items = allgather_json(mine)      # every process's JSON-able list, in order
    sync("exported")                  # a barrier (no-op in one process)

In a single process each is the obvious thing (`np.asarray`, True, `[mine]`,
nothing), so code written with them runs unchanged from one CPU to a pod.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def process_count() -> int:
    return jax.process_count()


def is_primary() -> bool:
    """True in the process that writes logs, exports and the console (process 0)."""
    return jax.process_index() == 0


_SCOPE = threading.local()


@contextlib.contextmanager
def scope(devices: Sequence[jax.Device] | None) -> Iterator[None]:
    """The host collectives of this thread (`allgather_bytes`, `sync`) run over `devices`
    only (None: every device). Asynchronous rollouts run the sampler and the learner in two
    threads on two sets of devices: a collective of one thread over the other's devices
    could meet that thread's own programs in another order in another process, and both
    would wait for ever."""
    before = getattr(_SCOPE, "devices", None)
    _SCOPE.devices = list(devices) if devices is not None else None
    try:
        yield
    finally:
        _SCOPE.devices = before


def _scoped() -> list[jax.Device] | None:
    return getattr(_SCOPE, "devices", None)


def _gather_whole(x: jax.Array) -> np.ndarray:
    """The whole of `x` on every process, by a copy replicated over its own devices (a
    collective over those devices only)."""
    if isinstance(x.sharding, NamedSharding):
        return np.asarray(_gather_on_devices(x).addressable_data(0))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _leaf_to_host(x):
    if not isinstance(x, jax.Array):
        return np.asarray(x)
    if x.is_fully_addressable:
        return np.asarray(x)
    if x.is_fully_replicated:  # every process holds the whole array
        return np.asarray(x.addressable_data(0))
    return _gather_whole(x)


def to_host(tree: Any) -> Any:
    """Numpy copies of every array in `tree`, gathered from all processes when an array
    is split over several (`multihost_utils.process_allgather`). Every process must
    call it with the same arrays (it is a collective when any array spans processes)."""
    return jax.tree.map(_leaf_to_host, tree)


def _from_host(x: np.ndarray, sharding) -> jax.Array:
    """A global array of host value `x` (the same in every process): each process puts
    its own devices' shards. No collective: `jax.device_put` would first check that
    every process holds the same value, over every device."""
    if sharding.is_fully_addressable:
        return jax.device_put(x, sharding)
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def _leaf_put(x, sharding):
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    if isinstance(x, np.ndarray | np.generic):
        return _from_host(np.asarray(x), sharding)
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # typed PRNG keys
        data = _leaf_put(_leaf_to_host(jax.random.key_data(x)), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
    return _from_host(_leaf_to_host(x), sharding)


def put(tree: Any, shardings: Any) -> Any:
    """`jax.device_put(tree, shardings)` that also works for shardings spanning several
    processes: a value that lives on this process's devices (or in host memory, the
    same in every process) goes through numpy, the form `device_put` accepts there."""
    return jax.tree.map(_leaf_put, tree, shardings)


def _reshard_leaf(x: jax.Array, sharding: NamedSharding) -> jax.Array:
    if x.is_fully_addressable or x.sharding.device_set == sharding.device_set:
        return jax.device_put(x, sharding)
    # spans processes, onto other devices: JAX moves data between processes only within one
    # device set, so the whole array is first replicated over its own devices (a
    # collective there), then each process copies the target's shards from its own copy
    whole = _gather_on_devices(x)
    local = whole.addressable_data(0)
    shards = [jax.device_put(local[index], device) for device, index
              in sharding.addressable_devices_indices_map(x.shape).items()]
    return jax.make_array_from_single_device_arrays(x.shape, sharding, shards)


def _identity(x):
    return x  # one function object: jit's cache then holds one program per sharding


def _gather_on_devices(x: jax.Array) -> jax.Array:
    """`x` replicated over the devices of its own mesh (a collective over them)."""
    return jax.jit(_identity, out_shardings=NamedSharding(x.sharding.mesh,
                                                          PartitionSpec()))(x)


def reshard(tree: Any, shardings: Any) -> Any:
    """`jax.device_put(tree, shardings)`, also onto devices other than the arrays' own when
    they span processes (asynchronous rollouts move each policy version from the learner's
    devices to the sampler's): per leaf, a copy replicated over the source devices, then
    local device copies (the replicated copies of the leaves may be alive at once: the
    extra memory is up to the whole parameters, per source device)."""
    return jax.tree.map(_reshard_leaf, tree, shardings)


def allgather_rows(row: np.ndarray) -> np.ndarray:
    """[processes, *row.shape]: every process's `row` (same shape and dtype everywhere),
    in process order; a collective over this thread's `scope`."""
    row = np.asarray(row)
    devices = _scoped()
    if jax.process_count() == 1:
        return row[None]
    if devices is None:
        return np.asarray(multihost_utils.process_allgather(row)).reshape((-1,) + row.shape)
    devices = sorted(devices, key=lambda d: (d.process_index, d.id))
    mesh = Mesh(np.asarray(devices), ("p",))
    mine = [d for d in devices if d.process_index == jax.process_index()]
    every = jax.make_array_from_single_device_arrays(
        (len(devices),) + row.shape, NamedSharding(mesh, PartitionSpec("p")),
        [jax.device_put(row[None], d) for d in mine])
    whole = _gather_whole(every)
    first = [i for i, d in enumerate(devices) if i == 0 or devices[i - 1].process_index
             != d.process_index]  # one row per process, the first of its devices
    return whole[first]


def allgather_bytes(data: bytes) -> list[bytes]:
    """Each process's `data`, in process order (a collective; `[data]` in one process)."""
    if jax.process_count() == 1:
        return [data]
    mine = np.frombuffer(data, np.uint8)
    sizes = allgather_rows(np.array([mine.size], np.int64))
    width = max(int(np.max(sizes)), 1)
    padded = np.zeros(width, np.uint8)
    padded[:mine.size] = mine
    every = allgather_rows(padded).reshape(-1, width)
    return [bytes(row[:int(n)]) for row, n in zip(every, np.ravel(sizes), strict=True)]


def allgather_json(items: list) -> list[list]:
    """Each process's JSON-serialisable `items`, in process order."""
    return [json.loads(b) for b in allgather_bytes(json.dumps(items).encode())]


def sync(name: str) -> None:
    """All processes wait here until each has reached `name` (no-op in one process; over
    this thread's `scope`)."""
    if jax.process_count() == 1:
        return
    if _scoped() is None:
        multihost_utils.sync_global_devices(name)
    else:
        allgather_rows(np.zeros(1, np.int32))


def local_rows(n: int) -> range:
    """The rows of an `n`-row host batch this process owns: a contiguous block, process
    p of P taking rows [p·n/P, (p+1)·n/P) (the remainder to the last ones)."""
    p, count = jax.process_index(), jax.process_count()
    return range(p * n // count, (p + 1) * n // count)
