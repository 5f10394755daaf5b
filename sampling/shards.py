"""Where a sampler's rows and KV pages live on the mesh: whole prompt groups per data shard.

With a mesh, the rows of a decode call are split over the batch axes (`data`, `fsdp`:
the learner's `batch` rule) in D equal blocks, and so is the page pool: shard d holds
pages [d·P/D, (d+1)·P/D) of the pool array and runs rows [d·S/D, (d+1)·S/D). Every
prompt belongs to one shard (`assign`): its prefill, its pages, its samples (or its
tree's nodes) and their pages are all there, so a row reads only local pages and each
device holds 1/D of the KV cache instead of all of it. Page tables hold page ids local
to the shard (0 is each shard's null page), and the programs that index the pool run
under `shard_map` over the batch axes (`local`), where the local ids are plain indices;
kv heads stay split over `tensor` by the compiler as before.

Rows are placed by prompt, so a row's place on the device differs from its index in
the one-device layout; `RowState.ids` carries that index and the sampler draws each
row's random number by it (`sampling.processors.sample`), so tokens do not depend on
the mesh. With one shard (no mesh, or batch axes of size 1) every layout is exactly
the one-device layout.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import jax
import numpy as np
from jax.sharding import PartitionSpec

from models import pallas_attention
from models.sharding import ActivationSharding
from sampling.layout import row_bucket


@dataclasses.dataclass(frozen=True)
class Shards:
    """The batch axes rows and pages are split over, and their number of shards D."""

    count: int = 1
    axes: tuple[str, ...] = ()
    sharding: ActivationSharding | None = None

    @property
    def spec(self) -> PartitionSpec:
        """Leading dimension split over the batch axes (rows, groups, prompts)."""
        if not self.axes:
            return PartitionSpec(None)
        return PartitionSpec(self.axes if len(self.axes) > 1 else self.axes[0])

    @property
    def pool_spec(self) -> PartitionSpec:
        """[L, P, ...] pool (or [L, S, ...] per-row tail) with its second dim split."""
        return PartitionSpec(None, *self.spec)


def of(sharding: ActivationSharding | None) -> Shards:
    """The shards of `sharding`'s batch rule (mesh axes of size > 1); one without it."""
    if sharding is None:
        return Shards()
    axes = tuple(a for a in dict(sharding.rules)["batch"] if sharding.mesh.shape[a] > 1)
    if not axes:
        return Shards(sharding=sharding)
    if not jax.config.jax_threefry_partitionable:
        raise ValueError("sampling on a mesh with batch axes needs jax_threefry_partitionable="
                         "True (JAX's default): rows draw by their one-device index")
    return Shards(math.prod(sharding.mesh.shape[a] for a in axes), axes, sharding)


def local(shards: Shards, fn: Callable, args: Sequence[str], out: str) -> Callable:
    """`fn` run once per batch shard on its block of every argument (`jax.shard_map`,
    manual over the batch axes only: `tensor` stays with the compiler); `fn` itself
    with one shard. `args` (one per argument) and `out` name how each is split:
    "pool" a tree of [L, P|S, ...] arrays on its second dim (pools, per-row tails),
    "rows" a tree of [S, ...] / [G, ...] arrays on its first (PageRows, rows' q/k/v),
    "whole" not at all (a step index).

    With the page attention's Pallas kernel (`pallas_attention.partials`, TPU) a mesh of
    one batch shard runs `fn` under `shard_map` too, over its size-1 batch axes: a Mosaic
    kernel runs only where every axis is manual (`models.pallas_attention`)."""
    axes = shards.axes
    if shards.count == 1:
        if shards.sharding is None or pallas_attention.current_partials() == "jax":
            return fn
        axes = tuple(dict(shards.sharding.rules)["batch"])
        shards = dataclasses.replace(shards, axes=axes)
    specs = {"pool": shards.pool_spec, "rows": shards.spec, "whole": PartitionSpec()}
    return jax.shard_map(fn, mesh=shards.sharding.mesh, in_specs=tuple(specs[a] for a in args),
                         out_specs=specs[out], axis_names=set(axes))


def pool_axes(shards: Shards) -> tuple:
    """The logical axes of a [L, P|S, K, ...] pool or tail: the second dim over the batch
    axes (when they split it) and kv heads over `tensor`."""
    return ("layers", "batch" if shards.count > 1 else None, "kv_heads", None, None)


def constrain_pool(tree, shards: Shards):
    """A pool or tail tree of [L, P|S, K, ...] arrays constrained to `pool_axes` (a tail
    split by layer, [S, K, ...] arrays, to the axes after `layers`)."""
    if shards.sharding is None:
        return tree
    axes = pool_axes(shards)
    return jax.tree.map(lambda a: shards.sharding.constrain(a, axes[len(axes) - a.ndim:]), tree)


def assign(rows_per_prompt: Sequence[int], count: int) -> np.ndarray:
    """[B] the shard of each prompt: consecutive prompts per shard, rows balanced
    (prompt p goes to shard floor(D · rows before p's middle / all rows)), so a prompt
    group is never split and shard loads differ by at most about one group."""
    weights = np.asarray(rows_per_prompt, np.float64)
    if count == 1 or not len(weights):
        return np.zeros(len(weights), np.int64)
    middle = np.cumsum(weights) - weights / 2
    return np.minimum((middle * count / max(weights.sum(), 1e-9)).astype(np.int64), count - 1)


def blocks(shard_of: np.ndarray, count: int) -> list[np.ndarray]:
    """The indices on each shard, in order: [indices of shard d for d in range(count)]."""
    return [np.flatnonzero(shard_of == d) for d in range(count)]


@dataclasses.dataclass(frozen=True)
class Placement:
    """The device rows of n items (samples, tree nodes), each shard's in its block.

    place: [n] the device row of item i (items of a shard keep their order);
    per:   rows per shard (`row_bucket` of the fullest shard), count · per rows in all;
    local: optional [n] the draw of item i (default i; several adapters in one call give
           each arm's items the draws of a call of their own, `sampling.flat`).
    """

    place: np.ndarray
    per: int
    count: int
    local: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return self.count * self.per

    def real(self) -> np.ndarray:
        """[rows] bool: the rows that hold an item."""
        real = np.zeros(self.rows, bool)
        real[self.place] = True
        return real

    def ids(self) -> np.ndarray | None:
        """[rows] each row's item index (0 on padding rows): `RowState.ids`; None with one
        shard, where rows are items in order."""
        if self.count == 1 and self.local is None:
            return None
        ids = np.zeros(self.rows, np.int32)
        ids[self.place] = np.arange(len(self.place)) if self.local is None else self.local
        return ids

    def to_items(self, x: np.ndarray) -> np.ndarray:
        """[rows, ...] device-row values -> [n, ...] in item order."""
        return x[self.place]


def place(shard_of: np.ndarray, count: int) -> Placement:
    """`Placement` of items whose shards are `shard_of` [n]."""
    shard_of = np.asarray(shard_of, np.int64)
    sizes = np.bincount(shard_of, minlength=count) if len(shard_of) else np.zeros(count, int)
    per = row_bucket(max(int(sizes.max()), 1))
    rank = np.zeros(len(shard_of), np.int64)
    for d, which in enumerate(blocks(shard_of, count)):
        rank[which] = np.arange(len(which))
    return Placement(shard_of * per + rank, per, count)
