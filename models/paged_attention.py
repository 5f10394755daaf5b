"""Attention over a paged KV cache: the sampler's `attend` for `decoder_layer`.

    pool = (k [L, P, K, Dh, page_size], v [L, P, K, page_size, Dh])  (page 0: null)

Keys keep a page's slots last and values its head dims last: a decode score
then sums over Dh with the slots contiguous, and the weighted sum of values
runs along contiguous Dh (the multiply-reduces XLA:CPU vectorises; the
[.., T, Dh] key layout with einsums measured ~6× slower per row at decode's
sizes, benchmarks/RESULTS.md).

Decode (`decode_attend`) reads the pool through page tables; nothing is copied
per row. The rows decoding together are split into *groups* that share a
prefix of pages: the G samples of a prompt share the prompt's pages, the
children of a tree node share the node's whole path. Each row's context is

    [its group's shared pages | its own pages (earlier segments, then this call's)]

and attention is computed in two parts merged exactly (the cascade / Hydragen
scheme):

  shared: the R queries of a group meet the group's keys and values in one
          batched product, [R·H/K, Dh] x [Dh, Ts] per (group, kv head): the
          shared prefix is read once per group, not once per row;
  own:    each row's query meets its own pages' keys, [H/K, Dh] x [Dh, To];

each part gives unnormalised fp32 sums o = Σ e^(s - m) v, its max m and its
mass l = Σ e^(s - m), and out = (o₁e^(m₁-m) + o₂e^(m₂-m)) / (l₁e^(m₁-m) +
l₂e^(m₂-m)) with m = max(m₁, m₂): the softmax over the union. Work and memory
grow with the distinct pages, not rows × prefix. Scores, softmax and sums run
in fp32 like `models.layers.attention`, the learner's.

`view_attend` is the dense-view decode this replaced (each row's pages copied
into a dense per-row view once per call), kept to measure against
(`sampling.engine.decode(..., attention="dense_view")`). `prefill_attend`
writes a prompt chunk's k/v into its pages and attends within the chunk.

The portable version is plain JAX (gathers by page table and batched
products). On TPU the two parts read through page tables, a group's shared pages
and a row's own pages, run as a Pallas kernel (`models.pallas_attention`) that
DMAs each page where the table says and returns the same partials; which one a
traced program uses is `pallas_attention.partials` (the decode programs set it by
backend, `sampling.engine.jit_decode`). A chunk of several new tokens per row (a
speculative verify) attends through `models.chunk_attention`, on the same parts.
"""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp

from models import layers, pallas_attention

NEG_INF = layers.NEG_INF


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class PageRows:
    """Which pages each of S decoding rows reads (device arrays).

    group_tables:  [G, MPs] int32 a group's shared pages, right-aligned (NULL
                   pages fill the left); slot t of the group view is page
                   t // page_size of this row.
    group_offsets: [G] int32 first real slot of the group view.
    group_rows:    [G, R] int32 the rows of each group (any valid row index in
                   unused places: their results are never read).
    row_group:     [S] int32 the group of each row, and
    row_slot:      [S] int32 its place in group_rows (group_rows[row_group[s],
                   row_slot[s]] == s for running rows).
    own_tables:    [S, MPo] int32 a row's own pages written by earlier calls,
                   or None when there are none (no zero-size arrays reach the
                   compiler).
    segment_tables: [S, steps / page_size] int32 the pages this call's tokens
                   go to (written when the call ends, `decode_tails.write_tail`).
    own_valid:     [S, MPo, page_size] bool the own slots that hold a token, or
                   None: every own slot does (full pages). A multi-turn row's
                   pages have gaps (a turn that stopped inside its segment, a
                   tool's reply shorter than its pages), which attention skips;
                   its RoPE positions count its tokens, not its slots.
    """

    group_tables: jax.Array
    group_offsets: jax.Array
    group_rows: jax.Array
    row_group: jax.Array
    row_slot: jax.Array
    own_tables: jax.Array | None
    segment_tables: jax.Array
    own_valid: jax.Array | None = None


def check_rows(rows: PageRows) -> None:
    g, r = rows.group_rows.shape
    s = rows.row_group.shape[0]
    chex.assert_shape(rows.group_offsets, (g,))
    chex.assert_shape(rows.group_tables, (g, None))
    chex.assert_shape(rows.row_slot, (s,))
    chex.assert_shape(rows.segment_tables, (s, None))
    if rows.own_tables is not None:
        chex.assert_shape(rows.own_tables, (s, None))
    if rows.own_valid is not None:
        if rows.own_tables is None:
            raise ValueError("own_valid without own_tables")
        chex.assert_shape(rows.own_valid, (s, rows.own_tables.shape[1], None))


def own_mask(rows: PageRows, page_size: int) -> jax.Array:
    """[S, MPo, page_size] bool: the own slots attention reads (all without `own_valid`)."""
    if rows.own_valid is not None:
        return rows.own_valid
    return jnp.ones(rows.own_tables.shape + (page_size,), bool)


def context_tables(rows: PageRows) -> jax.Array:
    """[S, MPs + MPo] each row's [group pages | earlier own pages]."""
    shared = rows.group_tables[rows.row_group]
    if rows.own_tables is None:
        return shared
    return jnp.concatenate([shared, rows.own_tables], axis=1)


def _row_partial(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array):
    """Unnormalised attention of one query per row over its pages.

    q [B, K, Q, Dh]; k [B, MP, K, Dh, ps]; v [B, MP, K, ps, Dh]; mask [B, MP, ps]
    -> (o [B, K, Q, Dh], m [B, K, Q], l [B, K, Q]) fp32, as multiply-reduces."""
    scale = q.shape[-1] ** -0.5
    qf = q.astype(jnp.float32)[:, None, :, :, :, None]                  # [B, 1, K, Q, Dh, 1]
    scores = jnp.sum(qf * k.astype(jnp.float32)[:, :, :, None], axis=4) * scale
    keep = mask[:, :, None, None, :]                                    # scores [B, MP, K, Q, ps]
    scores = jnp.where(keep, scores, NEG_INF)
    m = jnp.max(scores, axis=(1, 4))                                    # [B, K, Q]
    p = jnp.where(keep, jnp.exp(scores - m[:, None, :, :, None]), 0.0)
    o = jnp.sum(p[..., None] * v.astype(jnp.float32)[:, :, :, None], axis=(1, 4))
    return o, m, jnp.sum(p, axis=(1, 4))


def _group_partial(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array):
    """Unnormalised attention of a group's queries over its shared pages, as
    batched products (each key is used by the R·Q queries of its group).

    q [G, K, RQ, Dh]; k [G, MP, K, Dh, ps]; v [G, MP, K, ps, Dh]; mask [G, MP, ps]
    -> (o [G, K, RQ, Dh], m [G, K, RQ], l [G, K, RQ]) fp32."""
    scale = q.shape[-1] ** -0.5
    scores = jnp.einsum("gkqd,gmkdp->gkqmp", q, k, preferred_element_type=jnp.float32) * scale
    keep = mask[:, None, None]                                          # [G, 1, 1, MP, ps]
    scores = jnp.where(keep, scores, NEG_INF)
    m = jnp.max(scores, axis=(3, 4))
    p = jnp.where(keep, jnp.exp(scores - m[..., None, None]), 0.0)
    o = jnp.einsum("gkqmp,gmkpd->gkqd", p, v.astype(jnp.float32),
                   preferred_element_type=jnp.float32)
    return o, m, jnp.sum(p, axis=(3, 4))


def merge(parts) -> jax.Array:
    """Exact softmax over the union of parts [(o, m, l), ...] (see module doc)."""
    m = parts[0][1]
    for _, mi, _ in parts[1:]:
        m = jnp.maximum(m, mi)
    num = sum(o * jnp.exp(mi - m)[..., None] for o, mi, _ in parts)
    den = sum(li * jnp.exp(mi - m) for _, mi, li in parts)
    return num / den[..., None]


def write(pool: tuple, layer, pages: jax.Array, within: jax.Array, k: jax.Array,
          v: jax.Array) -> tuple:
    """Writes k, v [S, C, K, Dh] to slot `within` of page `pages` ([S, C]) of `layer`."""
    pool_k, pool_v = pool
    pool_k = pool_k.at[layer, pages, :, :, within].set(k.astype(pool_k.dtype))
    pool_v = pool_v.at[layer, pages, :, within].set(v.astype(pool_v.dtype))
    return pool_k, pool_v


def _tail_partial(q: jax.Array, k: jax.Array, v: jax.Array, keep: jax.Array):
    """Attention of each row's query over a dense run of its keys (the call's
    tail, or the dense-view baseline's whole view) where `keep` [S or 1, W].
    q [S, K, Q, Dh]; k [S, K, Dh, W]; v [S, K, W, Dh] -> (o, m, l) as `_row_partial`."""
    scale = q.shape[-1] ** -0.5
    scores = jnp.sum(q.astype(jnp.float32)[..., None] * k.astype(jnp.float32)[:, :, None],
                     axis=3) * scale                                    # [S, K, Q, W]
    keep = keep[:, None, None, :]
    scores = jnp.where(keep, scores, NEG_INF)
    m = jnp.max(scores, axis=-1)
    p = jnp.where(keep, jnp.exp(scores - m[..., None]), 0.0)
    o = jnp.sum(p[..., None] * v.astype(jnp.float32)[:, :, None], axis=3)
    return o, m, jnp.sum(p, axis=-1)


def _self_partial(q: jax.Array, k: jax.Array, v: jax.Array):
    """The query's own token: q [S, K, Q, Dh]; k, v [S, K, Dh] -> (o, m, l = 1)."""
    score = jnp.einsum("skqd,skd->skq", q.astype(jnp.float32), k.astype(jnp.float32))
    score = score * q.shape[-1] ** -0.5
    o = jnp.broadcast_to(v.astype(jnp.float32)[:, :, None], q.shape)
    return o, score, jnp.ones_like(score)


def _emit(new: tuple, layer, k: jax.Array, v: jax.Array) -> tuple:
    """Stores layer `layer`'s new k, v [S, 1, K, Dh] into the step's (k, v) [L, S, K, Dh]."""
    at = jnp.int32(0)
    return tuple(jax.lax.dynamic_update_slice(buf, x[:, 0][None].astype(buf.dtype),
                                              (layer, at, at, at))
                 for buf, x in zip(new, (k, v), strict=True))


def new_kv(pool: tuple, rows_count: int) -> tuple:
    """The per-step buffers the layers write their new k, v [L, S, K, Dh] to
    (the carry of the layer scan; the loop stores them after all layers)."""
    n, _, kv, dh, _ = pool[0].shape
    return (jnp.zeros((n, rows_count, kv, dh), pool[0].dtype),
            jnp.zeros((n, rows_count, kv, dh), pool[1].dtype))


def _pages_partial(q, pool, tables, mask, gathered):
    """(o, m, l) of q [B, K, Q, Dh] over pages `tables` [B, MP] where `mask` [B, MP, ps]:
    the kernel, or `gathered` (a partial of gathered pages) in plain JAX."""
    kind = pallas_attention.current_partials()
    if kind == "jax":
        return gathered(q, pool[0][tables], pool[1][tables], mask)
    return pallas_attention.paged_partial(q, pool[0], pool[1], tables, mask,
                                          interpret=kind == "pallas_interpret")


def _paged_parts(rows: PageRows, pool: tuple, qh: jax.Array) -> list:
    """The parts of rows' attention read through the page tables: each group's shared
    pages (one batched product per group: its rows' queries together) and each row's
    earlier own pages. qh [S, K, Q, Dh] (Q queries per kv head) -> [(o, m, l)] per row."""
    ps = pool[1].shape[2]
    s, kv, q, dh = qh.shape
    g, r = rows.group_rows.shape
    mps = rows.group_tables.shape[1]
    qg = qh[rows.group_rows].transpose(0, 2, 1, 3, 4).reshape(g, kv, r * q, dh)
    gmask = jnp.arange(mps * ps).reshape(mps, ps)[None] >= rows.group_offsets[:, None, None]
    o, m, l_ = _pages_partial(qg, pool, rows.group_tables, gmask, _group_partial)
    pick = (rows.row_group, slice(None), rows.row_slot)
    parts = [(o.reshape(g, kv, r, q, dh)[pick], m.reshape(g, kv, r, q)[pick],
              l_.reshape(g, kv, r, q)[pick])]
    if rows.own_tables is not None and rows.own_tables.shape[1]:  # the row's earlier pages
        parts.append(_pages_partial(qh, pool, rows.own_tables, own_mask(rows, ps),
                                    _row_partial))
    return parts


def decode_attention(rows: PageRows, step, pool: tuple, tail: tuple, q: jax.Array,
                     k: jax.Array, v: jax.Array) -> jax.Array:
    """One layer's decode attention at step `step` (one query per row).

    pool: (k [P, K, Dh, ps], v [P, K, ps, Dh]) the layer's pages; tail: (k [S, K, Dh, W],
    v [S, K, W, Dh]) the call's tokens so far (columns < step); q [S, 1, H, Dh], k, v
    [S, 1, K, Dh] the step's own -> out [S, 1, H, Dh]. The parts merged by log-sum-exp:
    the group's shared pages (one batched product per group), the row's earlier pages,
    its tail and itself. Every index (pages, rows, groups) is into these arrays, so the
    function also runs per shard on local blocks (`sampling.shards`)."""
    check_rows(rows)
    tail_k, tail_v = tail
    s, _, h, dh = q.shape
    kv = k.shape[2]
    qh = q.reshape(s, kv, h // kv, dh)
    parts = [_tail_partial(qh, tail_k, tail_v, (jnp.arange(tail_k.shape[-1]) < step)[None]),
             _self_partial(qh, k[:, 0], v[:, 0])]
    return merge(parts + _paged_parts(rows, pool, qh)).reshape(s, 1, h, dh).astype(q.dtype)


def decode_attend(rows: PageRows, step, pool: tuple, tail: tuple, attention=decode_attention):
    """`attend(q, k, v, new, layer)` of decode step `step`: `attention` (by default
    `decode_attention`; the sampler passes it run per shard) over layer `layer` of the
    pool (k [L, P, K, Dh, ps], v [L, P, K, ps, Dh]) through the page tables and of the
    call's tail (`decode_tails.init_tail`), which it does not change. The step's k/v go
    to `new` (`new_kv`); the loop stores them in the tail after the layers
    (`decode_tails.store_step`). Pool
    and tail stay out of the layer scan's carry: carried and updated there, XLA copied
    the whole tail every step."""
    pool_k, pool_v = pool
    tail_k, tail_v = tail

    def attend(q, k, v, new, layer):
        out = attention(rows, step, (pool_k[layer], pool_v[layer]),
                        (tail_k[layer], tail_v[layer]), q, k, v)
        return out, _emit(new, layer, k, v)

    return attend


def view_attend(mask: jax.Array, views: tuple):
    """The dense-view decode's `attend` (the baseline `decode_attend` replaced):
    every row's context copied into its own view, keys [L, S, K, Dh, W] and
    values [L, S, K, W, Dh]; attention over the view under `mask` [S, W] (the
    step's own column excluded) and the step's own token. The step's k/v go to
    `new`, stored into the views by the loop, as `decode_attend`."""
    view_k, view_v = views

    def attend(q, k, v, new, layer):
        s, _, h, dh = q.shape
        kv = k.shape[2]
        qg = q.reshape(s, kv, h // kv, dh)
        viewed = _tail_partial(qg, view_k[layer], view_v[layer], mask)
        out = merge([viewed, _self_partial(qg, k[:, 0], v[:, 0])])
        return out.reshape(s, 1, h, dh).astype(q.dtype), _emit(new, layer, k, v)

    return attend


def _chunk_partial(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array):
    """Unnormalised attention of a chunk's queries over the chunk's own keys.
    q [B, K, C·G, Dh] (query c, head g at c·G + g); k, v [B, C, K, Dh]; mask [B, C, C]
    (query, key) -> (o [B, K, C·G, Dh], m, l [B, K, C·G]) fp32."""
    b, kv, cg, _ = q.shape
    c = k.shape[1]
    scale = q.shape[-1] ** -0.5
    scores = jnp.einsum("bkqd,bjkd->bkqj", q, k, preferred_element_type=jnp.float32) * scale
    keep = jnp.broadcast_to(mask[:, :, None, :], (b, c, cg // c, c)).reshape(b, 1, cg, c)
    scores = jnp.where(keep, scores, NEG_INF)
    m = jnp.max(scores, axis=-1)
    p = jnp.where(keep, jnp.exp(scores - m[..., None]), 0.0)
    o = jnp.einsum("bkqj,bjkd->bkqd", p, v.astype(jnp.float32),
                   preferred_element_type=jnp.float32)
    return o, m, jnp.sum(p, axis=-1)


def extend_attend(context: jax.Array, valid: jax.Array, pages: jax.Array, within: jax.Array,
                  mask: jax.Array, store=write):
    """`attend` of a chunk appended to rows that already have a context in the pool (a
    tool's reply after a policy's turn): writes the chunk's k/v to pages/within [B, C]
    with `store`, and attends over the context's pages `context` [B, MP] where `valid`
    [B, MP, ps], merged exactly with causal attention within the chunk under `mask`
    [B, C, C]. The context is read with batched products, as a group's shared pages."""

    def attend(q, k, v, pool, layer):
        pool = store(pool, layer, pages, within, k, v)
        b, c, h, dh = q.shape
        kv = k.shape[2]
        qh = q.reshape(b, c, kv, h // kv, dh).transpose(0, 2, 1, 3, 4).reshape(
            b, kv, c * (h // kv), dh)
        read = _group_partial(qh, pool[0][layer][context], pool[1][layer][context], valid)
        own = _chunk_partial(qh, k, v, mask)
        out = merge([read, own]).reshape(b, kv, c, h // kv, dh).transpose(0, 2, 1, 3, 4)
        return out.reshape(b, c, h, dh).astype(q.dtype), pool

    return attend


def prefill_attend(pages: jax.Array, within: jax.Array, mask: jax.Array, store=write):
    """`attend` of a prompt chunk that is the whole context (prefill): writes
    its k/v to pages/within [S, C] with `store` (`write`, or `write` run per shard)
    and attends causally within the chunk under `mask` [S, C, C]."""

    def attend(q, k, v, pool, layer):
        pool = store(pool, layer, pages, within, k, v)
        return layers.causal_attention(q, k, v, mask), pool

    return attend
