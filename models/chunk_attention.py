"""Attention of a chunk of C new tokens per row over the paged KV cache: the
speculative decoder's verify forward (`sampling.spec_decode`).

The chunk's C queries read what a decode step's query reads (`models.paged_attention`:
the group's shared pages in one batched product, the row's earlier pages, its tail of
this call's keys) and the chunk itself causally, merged exactly by log-sum-exp. Rows
advance by different counts, so each row reads its tail up to its own `start` and
writes the chunk's keys there (`store_chunk`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from models.paged_attention import (
    PageRows,
    _chunk_partial,
    _paged_parts,
    _tail_partial,
    check_rows,
    merge,
)


def chunk_attention(rows: PageRows, start: jax.Array, pool: tuple, tail: tuple, q: jax.Array,
                    k: jax.Array, v: jax.Array) -> jax.Array:
    """One layer's attention of a chunk of C new tokens per row (a speculative verify
    forward, `sampling.spec_decode`): as `paged_attention.decode_attention`, the chunk's C
    queries read
    the group's shared pages, the row's earlier pages and its tail columns < `start` [S]
    (per row: rows advance by different counts), then the chunk itself causally.

    q [S, C, H, Dh]; k, v [S, C, K, Dh]; tail as `decode_attention` -> out [S, C, H, Dh]."""
    check_rows(rows)
    tail_k, tail_v = tail
    s, c, h, dh = q.shape
    kv = k.shape[2]
    qh = q.reshape(s, c, kv, h // kv, dh).transpose(0, 2, 1, 3, 4).reshape(
        s, kv, c * (h // kv), dh)                                     # query c, head g: c·G + g
    before = jnp.arange(tail_k.shape[-1])[None] < start[:, None]
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((c, c), bool)), (s, c, c))
    parts = [_tail_partial(qh, tail_k, tail_v, before), _chunk_partial(qh, k, v, causal)]
    out = merge(parts + _paged_parts(rows, pool, qh))
    return out.reshape(s, kv, c, h // kv, dh).transpose(0, 2, 1, 3, 4).reshape(
        s, c, h, dh).astype(q.dtype)


def chunk_attend(rows: PageRows, start: jax.Array, pool: tuple, tail: tuple,
                 attention=chunk_attention):
    """`attend(q, k, v, new, layer)` of a chunk of C tokens per row (`chunk_attention`,
    rows' tail columns < `start` [S] read): as `decode_attend`, the chunk's k/v go to
    `new` (`new_chunk_kv`) and the loop stores them (`store_chunk`)."""
    pool_k, pool_v = pool
    tail_k, tail_v = tail

    def attend(q, k, v, new, layer):
        out = attention(rows, start, (pool_k[layer], pool_v[layer]),
                        (tail_k[layer], tail_v[layer]), q, k, v)
        at = jnp.int32(0)
        new = tuple(jax.lax.dynamic_update_slice(buf, x[None].astype(buf.dtype),
                                                 (layer, at, at, at, at))
                    for buf, x in zip(new, (k, v), strict=True))
        return out, new

    return attend


def new_chunk_kv(pool: tuple, rows_count: int, chunk: int) -> tuple:
    """The buffers a chunk's layers write their k, v [L, S, C, K, Dh] to (`chunk_attend`)."""
    n, _, kv, dh, _ = pool[0].shape
    return tuple(jnp.zeros((n, rows_count, chunk, kv, dh), x.dtype) for x in pool)


def store_chunk(tail: tuple, new: tuple, start: jax.Array) -> tuple:
    """tail k [L, S, K, Dh, W] / v [L, S, K, W, Dh] columns start[s] .. start[s] + C - 1 =
    the chunk's k, v [L, S, C, K, Dh], one slice update per row (a start past W - C is
    clamped to W - C, a negative one to 0: the caller's rows that must not move write
    where nothing is read)."""
    k = new[0].transpose(1, 0, 3, 4, 2)                                       # [S, L, K, Dh, C]
    v = new[1].transpose(1, 0, 3, 2, 4)                                       # [S, L, K, C, Dh]
    at = jnp.int32(0)

    def put(t_k, t_v, x_k, x_v, col):
        return (jax.lax.dynamic_update_slice(t_k, x_k.astype(t_k.dtype), (at, at, at, col)),
                jax.lax.dynamic_update_slice(t_v, x_v.astype(t_v.dtype), (at, at, col, at)))

    return jax.vmap(put, in_axes=(1, 1, 0, 0, 0), out_axes=(1, 1))(
        tail[0], tail[1], k, v, start.astype(jnp.int32))
