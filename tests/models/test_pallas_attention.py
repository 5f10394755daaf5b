"""The Pallas page-attention kernel: in Pallas' TPU interpreter on CPU it gives the
plain-JAX partials (inside decode attention: tests/models/test_paged_attention.py), with
heads over `tensor` too; compiled for a v5e slice with libtpu."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import paged_attention, pallas_attention
from models.pallas_attention import paged_partial
from tests.models.test_paged_attention import _case


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_the_kernel_gives_the_gathered_partials(dtype):
    rng = np.random.default_rng(0)
    b, kv, nq, dh, ps, pages, mp = 4, 2, 3, 8, 4, 9, 3
    q = jnp.asarray(rng.standard_normal((b, kv, nq, dh)), jnp.float32)
    pool_k = jnp.asarray(rng.standard_normal((pages, kv, dh, ps)), dtype)
    pool_v = jnp.asarray(rng.standard_normal((pages, kv, ps, dh)), dtype)
    tables = jnp.asarray(rng.integers(0, pages, (b, mp)), jnp.int32)  # pages repeat
    mask = rng.random((b, mp, ps)) > 0.3
    mask[1] = False  # a block with no slot: m = NEG_INF, l = 0, o = 0, as the JAX path
    mask[2, 0] = False  # a first page of padding (a right-aligned prompt)
    mask = jnp.asarray(mask)
    got = paged_partial(q, pool_k, pool_v, tables, mask, interpret=True)
    want = paged_attention._group_partial(q, pool_k[tables], pool_v[tables], mask)
    # fp32 scores and sums over <= 12 keys: the online recurrence rounds differently
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-5)
    assert float(got[2][1].max()) == 0.0 and float(got[0][1].max()) == 0.0


def test_an_unknown_partials_kind_is_refused():
    with pytest.raises(ValueError, match="page partials must be one of"):
        with pallas_attention.partials("triton"):
            pass


def test_tpu_programs_use_the_kernel():
    assert pallas_attention.partials_for("tpu") == "pallas"
    assert pallas_attention.partials_for("cpu") == pallas_attention.partials_for("gpu") == "jax"


@pytest.mark.slow
def test_the_kernel_compiles_for_a_v5e_slice():
    """Mosaic compiles the kernel for v5e with the pool in bfloat16 (libtpu, no TPU)."""
    from launch import topology
    slice_ = topology.parse("v5e-4")
    topology.quiet_libtpu(slice_)
    device = topology.devices(slice_)[0]
    mesh = jax.sharding.Mesh(np.array([device]), ("x",))
    placed = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    b, kv, nq, dh, ps, pages, mp = 8, 2, 4, 64, 16, 64, 6
    shapes = [((b, kv, nq, dh), jnp.bfloat16), ((pages, kv, dh, ps), jnp.bfloat16),
              ((pages, kv, ps, dh), jnp.bfloat16), ((b, mp), jnp.int32),
              ((b, mp, ps), jnp.bool_)]
    args = [jax.ShapeDtypeStruct(shape, dtype, sharding=placed) for shape, dtype in shapes]
    lowered = jax.jit(paged_partial).lower(*args)
    assert "paged_partial" in lowered.as_text()  # our kernel's name on its custom call
    memory = lowered.compile().memory_analysis()
    assert memory.output_size_in_bytes >= 4 * b * kv * nq * (dh + 2)  # o, m, l in fp32


@pytest.mark.parametrize("shape", [(1, 1, 2), (1, 1, 4)], ids=["heads_split", "heads_whole"])
def test_the_kernel_runs_with_heads_over_tensor(shape):
    """One batch shard and kv heads over `tensor` (2 kv heads: split 2 ways, whole over
    4): the sampler's `local` wraps the attention in shard_map and the kernel maps the
    axes left to the compiler itself; the same outputs as one device."""
    from models import sharding
    from sampling import shards as shards_lib
    rng = np.random.default_rng(5)
    cache, rows, (q, k, v), layer, expected = _case(rng, [2, 3], 3, 1, 1, 2)
    mesh = sharding.make_mesh(shape, devices=jax.devices()[:int(np.prod(shape))])
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    shards = shards_lib.of(act)
    assert shards.count == 1
    pool = tuple(jnp.asarray(x[layer]) for x in cache[:2])
    tail = tuple(jnp.asarray(x[layer]) for x in cache[2:])
    rows = jax.tree.map(jnp.asarray, rows)

    def run(pool, tail, q, k, v):
        attention = shards_lib.local(shards, paged_attention.decode_attention,
                                     ("rows", "whole") + ("rows",) * 5, "rows")
        return attention(rows, 2, pool, tail, q, k, v)

    with pallas_attention.partials("pallas_interpret"):
        out = jax.jit(run)(pool, tail, q, k, v)
    # fp32 scores and sums over <= 50 keys of unit-variance data: ~1e-6 relative
    np.testing.assert_allclose(np.asarray(out)[:, 0], expected, rtol=2e-5, atol=2e-5)
