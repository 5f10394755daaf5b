"""A row's KV cache kept across sampler calls (`rollout.kv_on_update=keep`).

    kept = take(cache, hidden, rows)            # the rows' keys, values and last hidden state
    cache, hidden = put(cache, hidden, rows, kept)   # into another call's pages and rows

A row stopped between two decode segments (a carried, unfinished sample) is continued in a
later call. Recomputing its pages means a prefill of its prompt and tokens under the new
policy; keeping them means that call's rows attend to the keys and values the older
versions wrote, and its first new token is drawn from the older version's last hidden
state (through the new output head): PipelineRL's in-flight weight update.

`RowKV` holds one row's T tokens (its prompt and the tokens generated so far) in token
order, on the host: k, v [L, T, K, Dh] and the final-norm hidden state of the last
token [D]. `Pages` says where a row's tokens are: its page ids (global indices into the
pool array: shard d's local page p is d · pages_per_shard + p) and the slot of its first
token in them; the tokens run contiguously from that slot.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from sampling.kv_cache import KVCache


@dataclasses.dataclass
class RowKV:
    """One row's cache: k, v [L, T, K, Dh] and hidden [D] (host arrays)."""

    k: np.ndarray
    v: np.ndarray
    hidden: np.ndarray

    def __len__(self) -> int:
        return int(self.k.shape[1])


@dataclasses.dataclass
class Pages:
    """Where rows' tokens sit: pages [R, P] global page ids, start [R] the first token's
    slot in them, length [R] their token counts, device_row [R] each row's place in the
    call's row arrays (its hidden state)."""

    pages: np.ndarray
    start: np.ndarray
    length: np.ndarray
    device_row: np.ndarray


@jax.jit
def _gather(k_pool: jax.Array, v_pool: jax.Array, pages: jax.Array):
    """[L, R, P·ps, K, Dh] keys and values of the rows' pages, slot by slot."""
    n, _, kv, dh, ps = k_pool.shape
    r, p = pages.shape
    k = k_pool[:, pages].transpose(0, 1, 2, 5, 3, 4).reshape(n, r, p * ps, kv, dh)
    v = v_pool[:, pages].transpose(0, 1, 2, 4, 3, 5).reshape(n, r, p * ps, kv, dh)
    return k, v


@functools.partial(jax.jit, donate_argnums=0)
def _scatter(cache: KVCache, pages: jax.Array, k: jax.Array, v: jax.Array) -> KVCache:
    """`cache` with k, v [L, R, P·ps, K, Dh] written into the rows' pages [R, P]."""
    n, _, kv, dh, ps = cache.k.shape
    r, p = pages.shape
    k = k.reshape(n, r, p, ps, kv, dh).transpose(0, 1, 2, 4, 5, 3).astype(cache.k.dtype)
    v = v.reshape(n, r, p, ps, kv, dh).transpose(0, 1, 2, 4, 3, 5).astype(cache.v.dtype)
    return KVCache(cache.k.at[:, pages].set(k), cache.v.at[:, pages].set(v))


def take(cache: KVCache, hidden: jax.Array, where: Pages, to_host) -> list[RowKV]:
    """The rows' kept caches (`where`), copied to the host with `to_host` (a
    `models.multihost.to_host`: the pool may span processes)."""
    if not len(where.pages):
        return []
    k, v = _gather(cache.k, cache.v, jnp.asarray(where.pages))
    k, v, h = to_host((k, v, hidden[jnp.asarray(where.device_row)]))
    return [RowKV(k[:, i, s:s + t], v[:, i, s:s + t], h[i])
            for i, (s, t) in enumerate(zip(where.start, where.length, strict=True))]


def put(cache: KVCache, hidden: jax.Array, where: Pages, kept: list[RowKV]):
    """(cache, hidden) with each kept row's keys and values in its pages (`where`: the
    same rows, their tokens from `start`) and its hidden state in its row."""
    if not kept:
        return cache, hidden
    n, _, kv, dh, ps = cache.k.shape
    slots = where.pages.shape[1] * ps
    k = np.zeros((n, len(kept), slots, kv, dh), kept[0].k.dtype)
    v = np.zeros_like(k)
    for i, (row, s) in enumerate(zip(kept, where.start, strict=True)):
        if len(row) != where.length[i] or s + len(row) > slots:
            raise ValueError(f"kept row {i} has {len(row)} tokens, its pages hold "
                             f"{where.length[i]} from slot {s} of {slots}")
        k[:, i, s:s + len(row)], v[:, i, s:s + len(row)] = row.k, row.v
    shardings = (cache.k.sharding, cache.v.sharding, hidden.sharding)
    cache = _scatter(cache, jnp.asarray(where.pages), jnp.asarray(k), jnp.asarray(v))
    rows = jnp.asarray(where.device_row)
    hidden = hidden.at[rows].set(jnp.asarray(np.stack([r.hidden for r in kept]),
                                             hidden.dtype))
    # back in the layouts the decode expects (the pool split over the batch shards)
    k, v, hidden = jax.device_put((cache.k, cache.v, hidden), shardings)
    return KVCache(k, v), hidden
