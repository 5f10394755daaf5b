"""Page attention against a NumPy float64 softmax over each row's whole context."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import chunk_attention, decode_tails, paged_attention, pallas_attention
from sampling import engine

PS, K, Q, DH, LAYERS = 4, 2, 3, 8, 2


def _case(rng, group_sizes, shared_pages, own_pages, seg_pages, step):
    """A pool, rows in groups, a tail of the call's first `step` tokens, and
    the expected outputs of step `step` (float64 reference)."""
    s = sum(group_sizes)
    n_pages = 1 + len(group_sizes) * shared_pages + s * (own_pages + seg_pages)
    pool_k = rng.standard_normal((LAYERS, n_pages, K, DH, PS)).astype(np.float32)  # slots last
    pool_v = rng.standard_normal((LAYERS, n_pages, K, PS, DH)).astype(np.float32)
    tail_k = rng.standard_normal((LAYERS, s, K, DH, seg_pages * PS)).astype(np.float32)
    tail_v = rng.standard_normal((LAYERS, s, K, seg_pages * PS, DH)).astype(np.float32)
    free = iter(range(1, n_pages))
    g = len(group_sizes)
    group_tables = np.zeros((g, shared_pages), np.int32)
    group_offsets = np.zeros(g, np.int32)
    row_group = np.repeat(np.arange(g), group_sizes).astype(np.int32)
    for i in range(g):
        used = rng.integers(1, shared_pages + 1)  # right-aligned, NULL pages on the left
        group_tables[i, shared_pages - used:] = [next(free) for _ in range(used)]
        group_offsets[i] = (shared_pages - used) * PS + rng.integers(0, PS)
    own_tables = np.array([[next(free) for _ in range(own_pages)] for _ in range(s)],
                          np.int32).reshape(s, own_pages)
    segment = np.array([[next(free) for _ in range(seg_pages)] for _ in range(s)], np.int32)
    rows = engine.page_rows(group_tables, group_offsets, row_group, own_tables, segment,
                            np.zeros(s, bool))
    q = rng.standard_normal((s, 1, K * Q, DH)).astype(np.float32)
    k = rng.standard_normal((s, 1, K, DH)).astype(np.float32)
    v = rng.standard_normal((s, 1, K, DH)).astype(np.float32)
    layer = 1
    cache = (pool_k, pool_v, tail_k, tail_v)
    return cache, rows, (q, k, v), layer, _reference(cache, rows, (q, k, v), layer, step)


def _context(cache, rows, layer, r, step):
    """Row r's keys and values [N, K, Dh] float64: group pages, own pages, tail < step."""
    pool_k, pool_v, tail_k, tail_v = (np.asarray(x, np.float64) for x in cache)
    shared_pages, own_pages = rows.group_tables.shape[1], (
        0 if rows.own_tables is None else rows.own_tables.shape[1])
    gi = rows.row_group[r]
    keys, values = [], []
    for slot in range(shared_pages * PS):
        if slot >= rows.group_offsets[gi]:
            page = rows.group_tables[gi, slot // PS]
            keys.append(pool_k[layer, page, :, :, slot % PS])
            values.append(pool_v[layer, page, :, slot % PS])
    for slot in range(own_pages * PS):
        page = rows.own_tables[r, slot // PS]
        keys.append(pool_k[layer, page, :, :, slot % PS])
        values.append(pool_v[layer, page, :, slot % PS])
    for column in range(step):
        keys.append(tail_k[layer, r, :, :, column])
        values.append(tail_v[layer, r, :, column])
    return keys, values


def _softmax(keys, values, q):
    """[K·Q, Dh] one query [K·Q, Dh] over keys/values (lists of [K, Dh])."""
    keys, values = np.stack(keys), np.stack(values)
    out = np.zeros((K * Q, DH))
    for h in range(K * Q):
        scores = keys[:, h // Q] @ q[h] / np.sqrt(DH)
        p = np.exp(scores - scores.max())
        out[h] = (p / p.sum()) @ values[:, h // Q]
    return out


def _reference(cache, rows, qkv, layer, step):
    """[S, K·Q, Dh] float64 softmax attention of each row over its whole context."""
    q, k, v = (np.asarray(x, np.float64) for x in qkv)
    expected = np.zeros((q.shape[0], K * Q, DH))
    for r in range(q.shape[0]):
        keys, values = _context(cache, rows, layer, r, step)
        expected[r] = _softmax(keys + [k[r, 0]], values + [v[r, 0]], q[r, 0])
    return expected


@pytest.mark.parametrize("group_sizes,shared_pages,own_pages,seg_pages,step", [
    ([4, 4], 3, 0, 2, 0),        # flat: G samples of 2 prompts, first call, first step
    ([1, 3, 2], 4, 2, 1, 3),     # groups of 1-3 rows, earlier own pages, mid-segment
    ([5], 1, 1, 2, 6),           # one group, the step on the call's second page
    ([1, 1, 1], 2, 1, 1, 2),     # no group has two rows: one pass per row
])
@pytest.mark.parametrize("partials", ["jax", "pallas_interpret"])
def test_decode_attend_equals_a_softmax_over_the_whole_context(group_sizes, shared_pages,
                                                               own_pages, seg_pages, step,
                                                               partials):
    """Plain JAX, and the TPU kernel (`models.pallas_attention`) in Pallas' interpreter."""
    rng = np.random.default_rng(sum(group_sizes) + step)
    cache, rows, (q, k, v), layer, expected = _case(rng, group_sizes, shared_pages, own_pages,
                                                    seg_pages, step)
    pool_k, pool_v, tail_k, tail_v = map(jnp.asarray, cache)
    attend = paged_attention.decode_attend(jax.tree.map(jnp.asarray, rows), step,
                                           (pool_k, pool_v), (tail_k, tail_v))
    new = paged_attention.new_kv((pool_k, pool_v), q.shape[0])
    with pallas_attention.partials(partials):
        out, new = jax.jit(attend, static_argnums=4)(q, k, v, new, layer)
    # fp32 scores and sums over <= 90 keys of unit-variance data: ~1e-6 relative
    np.testing.assert_allclose(np.asarray(out)[:, 0], expected, rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(np.asarray(new[0])[layer], k[:, 0])
    np.testing.assert_array_equal(np.asarray(new[1])[layer], v[:, 0])
    tail_k, tail_v = map(np.asarray, decode_tails.store_step((tail_k, tail_v), new, step))
    np.testing.assert_array_equal(tail_k[layer, :, :, :, step], k[:, 0])
    np.testing.assert_array_equal(tail_v[layer, :, :, step], v[:, 0])


def test_bfloat16_decode_sums_in_float32():
    """With bfloat16 inputs, the scores, softmax and value sums stay fp32 and only the
    output is rounded to bfloat16: each output is the float64 softmax of the bf16 inputs
    rounded to bf16, except where fp32 rounding (~2^-24 relative, 1/2^15 of a bf16 step)
    straddles a bf16 boundary (a few in 10^4 of the outputs), and then by one step. A
    bf16 softmax (the former decode) is off by ~2^-9 relative in every weight and misses
    the rounded value in a large share of the outputs."""
    rng = np.random.default_rng(7)
    cache, rows, qkv, layer, _ = _case(rng, [4, 4, 3], 4, 1, 2, 5)
    bf16 = jnp.bfloat16
    cache = [np.asarray(jnp.asarray(x, bf16)) for x in cache]
    q, k, v = (np.asarray(jnp.asarray(x, bf16)) for x in qkv)
    expected = _reference(cache, rows, (q, k, v), layer, 5)  # float64 of the bf16 values
    pool_k, pool_v, tail_k, tail_v = map(jnp.asarray, cache)
    attend = paged_attention.decode_attend(jax.tree.map(jnp.asarray, rows), 5,
                                           (pool_k, pool_v), (tail_k, tail_v))
    new = paged_attention.new_kv((pool_k, pool_v), q.shape[0])
    out, _ = jax.jit(attend, static_argnums=4)(q, k, v, new, layer)
    assert out.dtype == bf16
    got = np.asarray(out[:, 0], np.float64)
    rounded = np.asarray(jnp.asarray(expected, bf16), np.float64)
    step = np.abs(rounded) * 2.0 ** -7  # one bf16 step (8 significand bits) at most
    assert np.all(np.abs(got - rounded) <= step)
    assert np.mean(got != rounded) <= 0.01, np.mean(got != rounded)


def test_write_tail_stores_the_call_in_its_pages_and_inactive_rows_in_the_null_page():
    rng = np.random.default_rng(0)
    (pool_k, pool_v, tail_k, tail_v), rows, *_ = _case(rng, [2, 2], 2, 1, 2, 0)
    pool_k, pool_v = jnp.asarray(pool_k), jnp.asarray(pool_v)
    active = np.array([True, False, True, True])
    new_k, new_v = map(np.asarray, decode_tails.write_tail(
        (pool_k, pool_v), (tail_k, tail_v), jax.tree.map(jnp.asarray, rows), active))
    for r in np.flatnonzero(active):
        for j, page in enumerate(rows.segment_tables[r]):
            np.testing.assert_array_equal(new_k[:, page], tail_k[:, r, :, :, j * PS:(j + 1) * PS])
            np.testing.assert_array_equal(new_v[:, page], tail_v[:, r, :, j * PS:(j + 1) * PS])
    untouched = [p for p in range(1, pool_k.shape[1]) if p not in rows.segment_tables[active]]
    np.testing.assert_array_equal(new_k[:, untouched], np.asarray(pool_k)[:, untouched])


def test_merge_of_a_fully_masked_part_is_the_other_part():
    rng = np.random.default_rng(1)
    q = jnp.asarray(rng.standard_normal((2, K, Q, DH)), jnp.float32)
    keys = jnp.asarray(rng.standard_normal((2, 3, K, DH, PS)), jnp.float32)
    values = jnp.asarray(rng.standard_normal((2, 3, K, PS, DH)), jnp.float32)
    some = paged_attention._row_partial(q, keys, values, jnp.ones((2, 3, PS), bool))
    none = paged_attention._row_partial(q, keys, values, jnp.zeros((2, 3, PS), bool))
    alone = some[0] / some[2][..., None]
    np.testing.assert_allclose(paged_attention.merge([some, none]), alone, rtol=1e-6)
    np.testing.assert_allclose(paged_attention.merge([none, some]), alone, rtol=1e-6)


def test_group_and_row_partials_agree():
    """The batched group form and the per-row form are the same attention."""
    rng = np.random.default_rng(2)
    r = 4
    q = jnp.asarray(rng.standard_normal((1, K, r * Q, DH)), jnp.float32)
    keys = jnp.asarray(rng.standard_normal((1, 3, K, DH, PS)), jnp.float32)
    values = jnp.asarray(rng.standard_normal((1, 3, K, PS, DH)), jnp.float32)
    mask = jnp.asarray(rng.random((1, 3, PS)) < 0.7)
    o, m, l_ = paged_attention._group_partial(q, keys, values, mask)
    per_row = q.reshape(K, r, Q, DH).transpose(1, 0, 2, 3)  # [R, K, Q, Dh]
    o2, m2, l2 = paged_attention._row_partial(
        per_row, jnp.broadcast_to(keys, (r,) + keys.shape[1:]),
        jnp.broadcast_to(values, (r,) + values.shape[1:]), jnp.broadcast_to(mask, (r, 3, PS)))
    np.testing.assert_allclose(o.reshape(K, r, Q, DH).transpose(1, 0, 2, 3), o2, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(m.reshape(K, r, Q).transpose(1, 0, 2), m2, rtol=1e-6)


@pytest.mark.parametrize("group_sizes,shared_pages,own_pages,seg_pages", [
    ([4, 4], 3, 0, 3),           # flat: G samples of 2 prompts, first call
    ([1, 3, 2], 4, 2, 2),        # groups of 1-3 rows, earlier own pages
])
def test_chunk_attend_is_causal_over_the_context_and_rows_tails_up_to_their_start(
        group_sizes, shared_pages, own_pages, seg_pages):
    rng = np.random.default_rng(len(group_sizes))
    cache, rows, _, layer, _ = _case(rng, group_sizes, shared_pages, own_pages, seg_pages, 0)
    s, c = sum(group_sizes), 3
    start = rng.integers(0, seg_pages * PS - c + 1, s).astype(np.int32)  # per row
    q = rng.standard_normal((s, c, K * Q, DH)).astype(np.float32)
    k = rng.standard_normal((s, c, K, DH)).astype(np.float32)
    v = rng.standard_normal((s, c, K, DH)).astype(np.float32)
    pool_k, pool_v, tail_k, tail_v = map(jnp.asarray, cache)
    attend = chunk_attention.chunk_attend(jax.tree.map(jnp.asarray, rows), jnp.asarray(start),
                                          (pool_k, pool_v), (tail_k, tail_v))
    new = chunk_attention.new_chunk_kv((pool_k, pool_v), s, c)
    out, new = jax.jit(attend, static_argnums=4)(q, k, v, new, layer)
    expected = np.zeros((s, c, K * Q, DH))
    for r in range(s):
        keys, values = _context(cache, rows, layer, r, start[r])
        for j in range(c):
            expected[r, j] = _softmax(keys + list(np.asarray(k[r, :j + 1], np.float64)),
                                      values + list(np.asarray(v[r, :j + 1], np.float64)),
                                      np.asarray(q[r, j], np.float64))
    # fp32 scores and sums over <= 80 keys of unit-variance data: ~1e-6 relative
    np.testing.assert_allclose(np.asarray(out), expected, rtol=2e-5, atol=2e-5)
    stored = chunk_attention.store_chunk((tail_k, tail_v), new, jnp.asarray(start))
    got_k, got_v = map(np.asarray, stored)
    for r in range(s):
        cols = slice(start[r], start[r] + c)
        np.testing.assert_array_equal(got_k[layer, r, :, :, cols], k[r].transpose(1, 2, 0))
        np.testing.assert_array_equal(got_v[layer, r, :, cols], v[r].transpose(1, 0, 2))
        rest = np.ones(seg_pages * PS, bool)
        rest[cols] = False  # the other columns keep what they held
        np.testing.assert_array_equal(got_k[:, r, :, :, rest], np.asarray(tail_k)[:, r, :, :, rest])
