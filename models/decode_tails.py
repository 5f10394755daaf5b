"""The call's own tokens in the sampler's decode: each row's keys and values of the
current decode call, kept in a small dense per-row tail beside the page pool.

    tail = (k [L, S, K, Dh, steps], v [L, S, K, steps, Dh])

`init_tail` zeroes it, the decode loop stores each step's k/v in its column
(`store_step`), and `write_tail` writes it to the rows' `segment_tables` pages when the
call ends. With the layers unrolled (`scan_layers=False`) a tail is one array per layer
(`split_layers`); `call_tokens` and `take_rows` read either form. The attention over it
is `models.paged_attention` (`decode_attend`, `view_attend`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from models.paged_attention import PageRows


def init_tail(pool: tuple, rows: PageRows) -> tuple:
    """The call's tokens' k [L, S, K, Dh, steps] and v [L, S, K, steps, Dh],
    zeroed: a row's newest keys, decoded into directly (one dense slice per row,
    a few pages long) and written to `segment_tables` by `write_tail`."""
    pool_k, pool_v = pool
    n, _, kv, dh, ps = pool_k.shape
    s, pages = rows.segment_tables.shape
    return (jnp.zeros((n, s, kv, dh, pages * ps), pool_k.dtype),
            jnp.zeros((n, s, kv, pages * ps, dh), pool_v.dtype))


def write_tail(pool: tuple, tail: tuple, rows: PageRows, active: jax.Array) -> tuple:
    """Stores the call's tokens (`init_tail`) in their pages; inactive rows'
    go to the null page."""
    pool_k, pool_v = pool
    tail_k, tail_v = tail
    n, s, kv, dh, steps = tail_k.shape
    ps = pool_k.shape[4]
    pages = steps // ps
    targets = jnp.where(active[:, None], rows.segment_tables, 0)
    k = tail_k.reshape(n, s, kv, dh, pages, ps).transpose(0, 1, 4, 2, 3, 5)
    v = tail_v.reshape(n, s, kv, pages, ps, dh).transpose(0, 1, 3, 2, 4, 5)
    return pool_k.at[:, targets].set(k), pool_v.at[:, targets].set(v)


def store_step(tail: tuple, new: tuple, step) -> tuple:
    """tail k [L, S, K, Dh, W] / v [L, S, K, W, Dh] column `step` = the step's new k, v
    [L, S, K, Dh]; a tail split by layer (`split_layers`) is written layer by layer."""
    at = jnp.int32(0)
    if isinstance(tail[0], tuple):
        return (tuple(jax.lax.dynamic_update_slice(k, new[0][i][..., None], (at, at, at, step))
                      for i, k in enumerate(tail[0])),
                tuple(jax.lax.dynamic_update_slice(v, new[1][i][:, :, None], (at, at, step, at))
                      for i, v in enumerate(tail[1])))
    return (jax.lax.dynamic_update_slice(tail[0], new[0][..., None], (at, at, at, at, step)),
            jax.lax.dynamic_update_slice(tail[1], new[1][:, :, :, None], (at, at, at, step, at)))


def split_layers(tail: tuple) -> tuple:
    """A tail or view (k [L, S, ...], v [L, S, ...]) as one array per layer: (k_0 .. k_L-1),
    (v_0 .. v_L-1), for unrolled layers. Under the layer scan each layer's block is a
    dynamic slice of the stacked array, which XLA:CPU copies before the attention reads
    it (a 6 MB copy per layer and step for a 64-row, 384-slot view of `tiny`); an array
    per layer is read in place. `call_tokens` stacks the call's slots back."""
    return tuple(tuple(x) for x in tail)


def call_tokens(tail: tuple, before) -> tuple:
    """The call's tokens of a tail or view, its slots from `before` on, stacked by layer:
    k [L, S, K, Dh, steps], v [L, S, K, steps, Dh] (`write_tail`'s input), from a stacked
    tail or one split by layer (sliced before stacking: a view's earlier slots are not
    copied)."""
    k, v = tail
    if isinstance(k, tuple):
        return (jnp.stack([x[..., before:] for x in k]),
                jnp.stack([x[:, :, before:] for x in v]))
    return k[..., before:], v[:, :, :, before:]


def take_rows(tail: tuple, src: jax.Array) -> tuple:
    """The tail's rows `src` [S] (stacked [L, S, ..] or split by layer)."""
    if isinstance(tail[0], tuple):
        return jax.tree.map(lambda a: a[src], tail)
    return tuple(x[:, src] for x in tail)
