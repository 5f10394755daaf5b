"""The in-memory tier: double-buffered host copies of a job's state, for rollback.

    snaps = Snapshots()
    snaps.take(step, state, host)      # returns at once; the copy runs on the device queue
    step, state, host = snaps.restore(template)   # the newest complete snapshot, on device

`take` enqueues a device-to-host copy of every array (`jax.device_put` into
the `pinned_host` memory of the same devices: asynchronous, and ordered before
any later computation that donates the arrays) and a deep copy of the host-
side state (JSON values and NumPy arrays). Two slots: the copy just started is
`pending`; it is promoted to `ready` only once every array has arrived.
`restore` waits for a pending copy to arrive and falls back to `ready` when it
failed, so a partial copy is never the one restored. On a device without a
`pinned_host` memory the copy stays on the device (a jitted copy), which still
survives the donation of the originals.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rl.checkpoint.persistent import storable, unstorable

_copy = jax.jit(jnp.copy)


def _device_copy(tree: Any) -> Any:
    """Fresh device buffers with the same values (leaf by leaf: the leaves may live on
    different device sets, e.g. a replicated PRNG key beside mesh-sharded params)."""
    return jax.tree.map(_copy, tree)


def _host_sharding(x: jax.Array):
    kinds = {m.kind for d in x.sharding.device_set for m in d.addressable_memories()}
    return x.sharding.with_memory_kind("pinned_host") if "pinned_host" in kinds else None


def to_host(tree: Any) -> Any:
    """An asynchronous copy of `storable(tree)` in host memory (see the module doc)."""
    tree = storable(tree)
    leaves, treedef = jax.tree.flatten(tree)
    targets = [_host_sharding(x) for x in leaves]
    if all(t is not None for t in targets):
        return jax.tree.unflatten(treedef, jax.device_put(leaves, targets))
    return _device_copy(tree)


class Snapshot:
    def __init__(self, step: int, arrays: Any, host: dict):
        self.step, self.arrays = step, arrays
        self.host = copy.deepcopy(host)  # a copy the job cannot mutate (arrays too)

    def complete(self) -> bool:
        try:
            return all(x.is_ready() for x in jax.tree.leaves(self.arrays))
        except Exception:  # noqa: BLE001 - a failed copy is never complete
            return False


class Snapshots:
    """The newest complete snapshot (`ready`) and the one being copied (`pending`)."""

    def __init__(self):
        self.ready: Snapshot | None = None
        self.pending: Snapshot | None = None
        self.last_take_s = 0.0

    def _promote(self) -> None:
        if self.pending is not None and self.pending.complete():
            self.ready, self.pending = self.pending, None

    def take(self, step: int, state: Any, host: dict) -> None:
        """Starts a snapshot of `state` after step `step`; does not wait for it."""
        start = time.perf_counter()
        self._promote()
        if self.pending is not None:  # still copying: let it finish, then replace it
            jax.block_until_ready(self.pending.arrays)
            self._promote()
        self.pending = Snapshot(step, to_host(state), host)
        self.last_take_s = time.perf_counter() - start

    def latest(self) -> Snapshot | None:
        """The newest complete snapshot (None before the first one completes)."""
        self._promote()
        return self.ready

    def restore(self, template: Any) -> tuple[int, Any, dict]:
        """(step, state on the devices of `template`, host) of the newest snapshot,
        once its copy has arrived (a copy that failed leaves the one before); the
        snapshot itself stays for another rollback."""
        if self.pending is not None:
            try:  # a copy still in flight is waited for; one that failed is dropped
                jax.block_until_ready(self.pending.arrays)
            except Exception:  # noqa: BLE001 - the copy failed: keep the older snapshot
                self.pending = None
        snap = self.latest()
        if snap is None:
            raise RuntimeError("no complete snapshot to restore")
        shardings = jax.tree.map(lambda x: x.sharding, storable(template))
        arrays = jax.tree.map(_back, snap.arrays, shardings)
        return snap.step, unstorable(arrays, template), copy.deepcopy(snap.host)


def _back(x: jax.Array, sharding) -> jax.Array:
    """One snapshot array back on `sharding`, never aliasing memory the job could
    overwrite (it donates what it gets):
      * a single-device CPU array in pinned_host memory comes back without a copy:
        `np.asarray` views it and `device_put` of that view is zero-copy on the CPU; an
        array made from external (NumPy-owned) memory is never written in place by a
        donating computation (XLA allocates its outputs), so the snapshot stays intact
        (tests/rl/checkpoint/test_fault_tolerance.py restores twice across a donation);
      * any other host array is transferred (fresh device buffers);
      * a snapshot kept on the device is copied."""
    if x.sharding.memory_kind == "pinned_host":
        devices = x.sharding.device_set
        if len(devices) == 1 and next(iter(devices)).platform == "cpu":
            return jax.device_put(np.asarray(x), sharding)
        return jax.device_put(x, sharding)
    return _copy(jax.device_put(x, sharding))
