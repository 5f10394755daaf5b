"""Page attention's partials as a Pallas TPU kernel.

`paged_partial(q, pool_k, pool_v, tables, mask)` is the unnormalised attention of B
query blocks over their pages, (o, m, l) as `models.paged_attention` merges them: the
group part (a group's R·Q queries over its shared pages) and the own part (a row's Q
queries over its earlier pages) of the decode's cascade. On TPU `decode_attention`
computes both with it (`partials_for`; a traced program reads `partials`); the
plain-JAX path gathers the pages instead. Both read the pool in its layout (k [P, K, Dh, ps], v [P, K, ps, Dh]).

Grid (B, pages): step (b, p) DMAs page tables[b, p] of every kv head into VMEM (the
tables are scalar-prefetched: the block index of a page is read from them) and folds
it into a running (max, mass, sum) per query: the flash-attention recurrence, scores
and sums in fp32. The max and mass are kept 128 lanes wide (Mosaic slices lanes only
at 128) and returned so; `paged_partial` takes lane 0.

Why not JAX's `ragged_paged_attention` (or the older `paged_attention`): they return
the softmax-normalised output of one context that starts at slot 0 and is masked by a
length alone. The decode's context is a cascade of parts merged exactly by their
log-sum-exp (shared pages read once per group, the row's own pages, the call's tail,
the token itself), a right-aligned prompt's first page starts with padding slots, and a
multi-turn row's own pages have gaps: a normalised output without its log-sum-exp
cannot be merged, and neither mask can be told by a length. This kernel keeps the
cascade's contract: any slot mask, partials out.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from models import layers

LANES = 128  # the max and mass are stored this wide

PARTIALS = ("jax", "pallas", "pallas_interpret")
_PARTIALS = contextvars.ContextVar("page_partials", default="jax")


@contextlib.contextmanager
def partials(kind: str):
    """Within it, traced decode attention reads pages with `kind`: "jax" (gathers and
    batched products), "pallas" (the TPU kernel) or "pallas_interpret" (the kernel in
    Pallas' TPU interpreter, any backend: tests)."""
    if kind not in PARTIALS:
        raise ValueError(f"page partials must be one of {PARTIALS}, got {kind!r}")
    token = _PARTIALS.set(kind)
    try:
        yield
    finally:
        _PARTIALS.reset(token)


def current_partials() -> str:
    """The page partials code traced now uses (`partials`)."""
    return _PARTIALS.get()


def partials_for(platform: str) -> str:
    """The page partials a program for `platform` uses: the kernel on TPU."""
    return "pallas" if platform == "tpu" else "jax"


def _kernel(tables_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, m_ref, l_ref,
            m_acc, l_acc, o_acc, *, scale: float, heads: int):
    """One (block b, page p) step: q [1, K, Q, Dh]; k [1, K, Dh, ps]; v [1, K, ps, Dh];
    mask [1, 1, ps] int32 -> running (m, l [K, Q, LANES], o [K, Q, Dh]) fp32."""
    del tables_ref  # read by the index maps
    page = pl.program_id(1)

    @pl.when(page == 0)
    def _():
        m_acc[...] = jnp.full(m_acc.shape, layers.NEG_INF, jnp.float32)
        l_acc[...] = jnp.zeros(l_acc.shape, jnp.float32)
        o_acc[...] = jnp.zeros(o_acc.shape, jnp.float32)

    keep = mask_ref[0] > 0                                                  # [1, ps]
    for h in range(heads):  # kv heads, unrolled: 2-D products only
        q = q_ref[0, h].astype(jnp.float32)                                 # [Q, Dh]
        s = jnp.dot(q, k_ref[0, h].astype(jnp.float32),
                    preferred_element_type=jnp.float32) * scale             # [Q, ps]
        s = jnp.where(keep, s, layers.NEG_INF)
        m_prev = jnp.max(m_acc[h], axis=1, keepdims=True)                  # [Q, 1]
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
        p = jnp.where(keep, jnp.exp(s - m_new), 0.0)
        alpha = jnp.exp(m_prev - m_new)
        l_new = alpha * jnp.max(l_acc[h], axis=1, keepdims=True) + jnp.sum(p, axis=1,
                                                                          keepdims=True)
        o_acc[h] = alpha * o_acc[h] + jnp.dot(p, v_ref[0, h].astype(jnp.float32),
                                              preferred_element_type=jnp.float32)
        m_acc[h] = jnp.broadcast_to(m_new, m_acc.shape[1:])
        l_acc[h] = jnp.broadcast_to(l_new, l_acc.shape[1:])

    @pl.when(page == pl.num_programs(1) - 1)
    def _():
        o_ref[0] = o_acc[...]
        m_ref[0] = m_acc[...]
        l_ref[0] = l_acc[...]


def paged_partial(q: jax.Array, pool_k: jax.Array, pool_v: jax.Array, tables: jax.Array,
                  mask: jax.Array, interpret: bool = False):
    """Unnormalised attention of query blocks over their pages, by the Pallas kernel.

    q [B, K, Q, Dh]; pool_k [P, K, Dh, ps]; pool_v [P, K, ps, Dh]; tables [B, MP] int32
    page ids; mask [B, MP, ps] bool the slots read -> (o [B, K, Q, Dh], m [B, K, Q],
    l [B, K, Q]) fp32, `models.paged_attention`'s partials. `interpret`: run the kernel
    in Pallas' TPU interpreter (any backend; tests on CPU).

    A Mosaic kernel is not partitioned by the compiler: inside a `shard_map` (the
    sampler's batch shards, `sampling.shards.local`) the mesh axes still left to the
    compiler get one of their own, kv heads split over `tensor` where it divides them
    (else every tensor shard computes all heads)."""
    mesh = jax.sharding.get_abstract_mesh()
    free = () if mesh.empty else tuple(
        a for a, kind in zip(mesh.axis_names, mesh.axis_types, strict=True)
        if kind != jax.sharding.AxisType.Manual)
    call = functools.partial(_paged_partial, interpret=interpret)
    if not free:
        return call(q, pool_k, pool_v, tables, mask)
    split = "tensor" in free and q.shape[1] % mesh.shape["tensor"] == 0
    heads = jax.sharding.PartitionSpec(None, "tensor" if split else None)
    whole = jax.sharding.PartitionSpec()
    return jax.shard_map(call, mesh=mesh, in_specs=(heads, heads, heads, whole, whole),
                         out_specs=(heads, heads, heads), axis_names=set(free))(
        q, pool_k, pool_v, tables, mask)


@functools.partial(jax.jit, static_argnames=("interpret",))
def _paged_partial(q, pool_k, pool_v, tables, mask, interpret: bool):
    """`paged_partial` on arrays whose every mesh axis is manual (or no mesh)."""
    b, kv, nq, dh = q.shape
    mp = tables.shape[1]
    ps = pool_k.shape[-1]
    varying = jax.typeof(q).manual_axis_type
    grid = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(b, mp),
        in_specs=[
            pl.BlockSpec((1, kv, nq, dh), lambda i, p, t: (i, 0, 0, 0)),
            pl.BlockSpec((1, kv, dh, ps), lambda i, p, t: (t[i, p], 0, 0, 0)),
            pl.BlockSpec((1, kv, ps, dh), lambda i, p, t: (t[i, p], 0, 0, 0)),
            pl.BlockSpec((1, 1, ps), lambda i, p, t: (i * mp + p, 0, 0)),
        ],
        out_specs=[
            pl.BlockSpec((1, kv, nq, dh), lambda i, p, t: (i, 0, 0, 0)),
            pl.BlockSpec((1, kv, nq, LANES), lambda i, p, t: (i, 0, 0, 0)),
            pl.BlockSpec((1, kv, nq, LANES), lambda i, p, t: (i, 0, 0, 0)),
        ],
        scratch_shapes=[pltpu.VMEM((kv, nq, LANES), jnp.float32),
                        pltpu.VMEM((kv, nq, LANES), jnp.float32),
                        pltpu.VMEM((kv, nq, dh), jnp.float32)])
    o, m, l_ = pl.pallas_call(
        functools.partial(_kernel, scale=dh ** -0.5, heads=kv),
        grid_spec=grid,
        # under shard_map the outputs vary over the mesh axes the queries do
        out_shape=[jax.ShapeDtypeStruct(shape, jnp.float32, manual_axis_type=varying)
                   for shape in ((b, kv, nq, dh), (b, kv, nq, LANES), (b, kv, nq, LANES))],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        interpret=pltpu.InterpretParams() if interpret else False,
        name="paged_partial",
    )(tables.astype(jnp.int32), q, pool_k, pool_v,
      mask.reshape(b * mp, 1, ps).astype(jnp.int32))
    return o, m[..., 0], l_[..., 0]
