"""Properties of the pure forward pass that do not need a reference model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import layers, transformer
from tests.tolerances import fp32_atol

_fwd = jax.jit(models.apply, static_argnums=0)


@pytest.fixture(scope="module")
def tiny():
    config = models.get_preset("tiny").replace(num_layers=2)
    return config, models.init(config, jax.random.key(0))


def _tokens(config, shape, seed=0):
    return jax.random.randint(jax.random.key(seed), shape, 0, config.vocab_size)


def test_shapes_dtypes_and_jit(tiny):
    config, params = tiny
    tokens = _tokens(config, (3, 17))
    eager = models.apply(config, params, tokens[:, :5])
    jitted = _fwd(config, params, tokens)[:, :5]
    assert eager.shape == (3, 5, config.vocab_size) and eager.dtype == jnp.float32
    # 5 vs 17 tokens, op-by-op vs fused: other summation orders; longest sum: mlp_dim
    np.testing.assert_allclose(eager, jitted, atol=fp32_atol(jitted, config.mlp_dim), rtol=0)


def test_causality(tiny):
    config, params = tiny
    tokens = _tokens(config, (2, 20))
    changed = tokens.at[:, 12:].set((tokens[:, 12:] + 1) % config.vocab_size)
    a = _fwd(config, params, tokens)
    b = _fwd(config, params, changed)
    np.testing.assert_allclose(a[:, :12], b[:, :12], atol=1e-5)
    assert np.abs(np.asarray(a[:, 12:] - b[:, 12:])).max() > 1e-3


def test_rope_is_relative(tiny):
    """Shifting every position by a constant leaves the logits unchanged."""
    config, params = tiny
    tokens = _tokens(config, (2, 16))
    pos = jnp.broadcast_to(jnp.arange(16), (2, 16))
    a = _fwd(config, params, tokens, pos)
    b = _fwd(config, params, tokens, pos + 37)
    np.testing.assert_allclose(a, b, atol=2e-4)
    c = _fwd(config, params, tokens, pos * 2)  # not a shift: must differ
    assert np.abs(np.asarray(a - c)).max() > 1e-3


def test_packing_with_segment_ids_equals_separate_rows(tiny):
    config, params = tiny
    x, y = _tokens(config, (1, 9), 1), _tokens(config, (1, 7), 2)
    packed = jnp.concatenate([x, y, jnp.zeros((1, 4), jnp.int32)], axis=1)
    seg = jnp.asarray([[1] * 9 + [2] * 7 + [0] * 4])
    pos = jnp.asarray([list(range(9)) + list(range(7)) + [0] * 4])
    out = _fwd(config, params, packed, pos, segment_ids=seg)
    for got, row in ((out[:, :9], x), (out[:, 9:16], y)):
        want = _fwd(config, params, row)
        # 20 packed vs 9 or 7 tokens sum in other orders; longest sum: mlp_dim
        np.testing.assert_allclose(got, want, atol=fp32_atol(want, config.mlp_dim), rtol=0)


def test_left_padding_with_positions(tiny):
    config, params = tiny
    x = _tokens(config, (1, 10), 3)
    padded = jnp.concatenate([jnp.zeros((1, 5), jnp.int32), x], axis=1)
    pos = jnp.asarray([[0] * 5 + list(range(10))])
    seg = jnp.asarray([[0] * 5 + [1] * 10])
    out = _fwd(config, params, padded, pos, segment_ids=seg)
    want = _fwd(config, params, x)
    # 15 vs 10 tokens may sum in other orders; longest sum: mlp_dim
    np.testing.assert_allclose(out[:, 5:], want, atol=fp32_atol(want, config.mlp_dim), rtol=0)


@pytest.mark.parametrize("remat", ["none", "full", "dots"])
def test_scan_unrolled_and_remat_agree_in_value_and_gradient(tiny, remat):
    config, params = tiny
    tokens = _tokens(config, (2, 12))

    def loss(p, cfg):
        logits = _fwd(cfg, p, tokens)
        return jax.nn.logsumexp(logits, -1).mean() - logits[..., 0].mean()

    grad_fn = jax.jit(jax.value_and_grad(loss), static_argnums=1)
    ref_val, ref_grad = grad_fn(params, config.replace(scan_layers=False))
    val, grad = grad_fn(params, config.replace(remat=remat))
    # scan/remat fuse differently from the unrolled layers, so sums run in other
    # orders; the longest: mlp_dim, the vocab's logsumexp, the tokens a grad sums over
    n = max(config.mlp_dim, config.vocab_size, tokens.size)
    np.testing.assert_allclose(val, ref_val, atol=fp32_atol(ref_val, n), rtol=0)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=fp32_atol(b, n), rtol=0),
                 grad, ref_grad)


def test_bf16_compute_close_to_fp32(tiny):
    config, params = tiny
    tokens = _tokens(config, (2, 16))
    full = _fwd(config, params, tokens)
    half = _fwd(config.replace(dtype="bfloat16"), params, tokens)
    assert half.dtype == jnp.float32
    assert float(jnp.abs(half - full).max()) < 0.1 * float(jnp.abs(full).max())
    stored = models.init(config.replace(param_dtype="bfloat16"), jax.random.key(0))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(stored))


def test_gqa_equals_repeated_kv_attention():
    """Grouped attention equals explicit repetition of k/v heads (NumPy)."""
    rng = np.random.RandomState(0)
    q = rng.randn(2, 5, 6, 8).astype(np.float32)
    k = rng.randn(2, 5, 2, 8).astype(np.float32)
    v = rng.randn(2, 5, 2, 8).astype(np.float32)
    mask = np.tril(np.ones((5, 5), bool))[None].repeat(2, 0)
    out = np.asarray(layers.attention(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v),
                                      jnp.asarray(mask)))
    kr, vr = np.repeat(k, 3, axis=2), np.repeat(v, 3, axis=2)
    s = np.einsum("bthd,bshd->bhts", q, kr) / np.sqrt(8)
    s = np.where(mask[:, None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = np.einsum("bhts,bshd->bthd", p, vr)
    # XLA fp32 vs a NumPy reference (float64 from the /sqrt(8) on); longest sum: head_dim 8
    np.testing.assert_allclose(out, want, atol=fp32_atol(want, 8), rtol=0)


@pytest.mark.parametrize("t,block", [(300, 128), (300, 64), (129, 128), (2100, 128)])
def test_blocked_causal_attention_equals_full(t, block):
    """Skipping future key blocks changes nothing, with packed segments too."""
    rng = np.random.RandomState(t)
    q = jnp.asarray(rng.randn(2, t, 4, 16), jnp.float32)
    k = jnp.asarray(rng.randn(2, t, 2, 16), jnp.float32)
    v = jnp.asarray(rng.randn(2, t, 2, 16), jnp.float32)
    seg = jnp.asarray(np.sort(rng.randint(1, 4, (2, t)), axis=1))
    mask = np.asarray(transformer.causal_mask(t, seg, 2))
    full = layers.attention(q, k, v, jnp.asarray(mask))
    blocked = jax.jit(layers.causal_attention, static_argnums=4)(q, k, v, jnp.asarray(mask),
                                                                 block)
    # other key counts per block change the softmax/value sums' order; longest: t keys
    np.testing.assert_allclose(np.asarray(blocked), np.asarray(full),
                               atol=fp32_atol(full, t), rtol=0)
