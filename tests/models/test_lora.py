"""models.lora / models.linear: adapters start as the base, the factored forward equals
the merged weights (built here in NumPy), gradients reach the adapters only, and a
quantized base works under both forms and both layer loops."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import lora, quant

CONFIG = dataclasses.replace(models.get_preset("tiny"), num_layers=2, vocab_size=96,
                             hidden_size=64, mlp_dim=128, num_heads=2, num_kv_heads=1,
                             head_dim=32)
LORA = lora.LoraConfig(rank=4, alpha=8.0)


def params():
    return models.init(CONFIG, jax.random.key(0))


def trained_adapters(cfg=LORA, seed=1):
    """Adapters as after some training (b != 0, so the adapter changes the model)."""
    ad = lora.init(CONFIG, cfg, jax.random.key(seed))
    return jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.key(seed + 1),
                                                              x.shape), ad)


def numpy_merge(base: dict, adapters: dict, scale: float) -> dict:
    """W + s·a·b for every adapted weight, in float64 NumPy: a [L, *in, r], b [L, r, *out]."""
    layers = {k: np.asarray(v, np.float64) for k, v in base["layers"].items()}
    for name, ab in adapters["layers"].items():
        a, b = np.asarray(ab["a"], np.float64), np.asarray(ab["b"], np.float64)
        n_in = lora.TARGETS[name]
        lhs = a.reshape(a.shape[0], -1, a.shape[-1])
        rhs = b.reshape(b.shape[0], b.shape[1], -1)
        delta = np.matmul(lhs, rhs).reshape(a.shape[:1 + n_in] + b.shape[2:])
        layers[name] = layers[name] + scale * delta
    return {**base, "layers": {k: v.astype(np.float32) for k, v in layers.items()}}


TOKENS = jax.random.randint(jax.random.key(5), (2, 10), 0, CONFIG.vocab_size)
apply = jax.jit(models.apply, static_argnums=0)


def test_fresh_adapters_leave_the_base_unchanged_bit_for_bit():
    p = params()
    ad = lora.init(CONFIG, LORA, jax.random.key(1))
    assert all(float(jnp.abs(x["b"]).max()) == 0 for x in ad["layers"].values())
    np.testing.assert_array_equal(np.asarray(apply(CONFIG, lora.attach(p, ad, LORA), TOKENS)),
                                  np.asarray(apply(CONFIG, p, TOKENS)))
    # PEFT's init: a uniform in ±1/sqrt(fan_in)
    a = np.asarray(ad["layers"]["o"]["a"])  # [L, H, Dh, r]: fan_in H·Dh
    assert np.abs(a).max() <= (CONFIG.num_heads * CONFIG.head_dim) ** -0.5


@pytest.mark.parametrize("scan", [True, False])
def test_the_factored_forward_equals_the_merged_weights(scan):
    config = dataclasses.replace(CONFIG, scan_layers=scan)
    p, ad = params(), trained_adapters()
    factored = apply(config, lora.attach(p, ad, LORA), TOKENS)
    reference = apply(config, jax.tree.map(jnp.asarray, numpy_merge(p, ad, LORA.scale)), TOKENS)
    merged = apply(config, lora.merge(config, p, ad, LORA), TOKENS)
    # fp32 sums in another order (x W + s (x a) b vs x (W + s a b)): logits of O(1)
    # differ by a few ulps of the hidden states, far below the adapter's own effect
    assert float(jnp.abs(apply(config, p, TOKENS) - reference).max()) > 1e-2
    np.testing.assert_allclose(np.asarray(factored), np.asarray(reference), atol=5e-5)
    np.testing.assert_allclose(np.asarray(merged), np.asarray(reference), atol=5e-5)


def test_only_some_targets_get_adapters():
    cfg = lora.LoraConfig(rank=2, alpha=2.0, targets=("q", "down"))
    ad = trained_adapters(cfg)
    assert set(ad["layers"]) == {"q", "down"}
    specs = lora.adapter_specs(CONFIG, cfg)["layers"]
    L, D, F = CONFIG.num_layers, CONFIG.hidden_size, CONFIG.mlp_dim
    assert specs["q"]["a"].shape == (L, D, 2)
    assert specs["q"]["b"].shape == (L, 2, CONFIG.num_heads, CONFIG.head_dim)
    assert specs["down"]["a"].shape == (L, F, 2) and specs["down"]["b"].shape == (L, 2, D)
    p = params()
    np.testing.assert_allclose(
        np.asarray(apply(CONFIG, lora.attach(p, ad, cfg), TOKENS)),
        np.asarray(apply(CONFIG, jax.tree.map(jnp.asarray, numpy_merge(p, ad, cfg.scale)),
                         TOKENS)), atol=5e-5)


@pytest.mark.parametrize("kind", ["none", "nf4"])
def test_gradients_of_the_factored_form_are_those_of_the_merged_weights(kind):
    # nf4: the quantized matmul's own backward (it re-dequantizes) against autodiff
    # through the merged weights of the same dequantized base
    p, ad = params(), trained_adapters()
    if kind != "none":
        p = lora.quantize_base(CONFIG, p, kind, block=32)

    def loss(adapters, merged):
        w = lora.merge(CONFIG, p, adapters, LORA) if merged else lora.attach(p, adapters, LORA)
        return jnp.mean(jax.nn.log_softmax(models.apply(CONFIG, w, TOKENS))[..., 3])

    g_factored = jax.jit(jax.grad(loss), static_argnums=1)(ad, False)
    g_merged = jax.jit(jax.grad(loss), static_argnums=1)(ad, True)
    for x, y in zip(jax.tree.leaves(g_factored), jax.tree.leaves(g_merged)):
        scale = float(jnp.abs(y).max())
        assert scale > 0
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-4 * scale)
    if kind != "none":
        return
    # at b = 0 the gradient of a is exactly zero and b's is not (LoRA's start)
    fresh = lora.init(CONFIG, LORA, jax.random.key(1))
    g = jax.jit(jax.grad(loss), static_argnums=1)(fresh, False)["layers"]["up"]
    assert float(jnp.abs(g["a"]).max()) == 0 and float(jnp.abs(g["b"]).max()) > 0


@pytest.mark.parametrize("kind,scan", [("int8", True), ("nf4", False)])
def test_a_quantized_base_runs_factored_and_merged_alike(kind, scan):
    p, ad = params(), trained_adapters()
    base = lora.quantize_base(CONFIG, p, kind, block=32)
    assert isinstance(base["layers"]["o"], quant.Quantized)
    assert base["layers"]["o"].axis == -2 and base["layers"]["q"].axis == -3
    dequantized = {**p, "layers": {k: quant.dequantize(v) if isinstance(v, quant.Quantized)
                                   else v for k, v in base["layers"].items()}}
    reference = numpy_merge(dequantized, ad, LORA.scale)
    config = dataclasses.replace(CONFIG, scan_layers=scan)
    out = apply(config, lora.attach(base, ad, LORA), TOKENS)
    np.testing.assert_allclose(np.asarray(out), np.asarray(
        apply(config, jax.tree.map(jnp.asarray, reference), TOKENS)), atol=5e-5)
    # the base with the adapter off is the dequantized model
    np.testing.assert_allclose(np.asarray(apply(CONFIG, base, TOKENS)),
                               np.asarray(apply(CONFIG, dequantized, TOKENS)), atol=5e-5)


def test_the_checksum_sees_any_change_and_nothing_else():
    ad = trained_adapters()
    c = float(lora.checksum(ad))
    assert float(lora.checksum(jax.tree.map(jnp.copy, ad))) == c
    moved = jax.tree.map(lambda x: x, ad)
    moved["layers"]["v"]["b"] = ad["layers"]["v"]["b"].at[1, 0, 0, 0].add(1e-3)
    assert float(lora.checksum(moved)) != c
    swapped = jax.tree.map(lambda x: x, ad)
    a = ad["layers"]["k"]["a"]
    swapped["layers"]["k"]["a"] = a.at[0, 0, 0].set(a[0, 0, 1]).at[0, 0, 1].set(a[0, 0, 0])
    assert float(lora.checksum(swapped)) != c


def test_bad_settings_fail_with_one_line():
    with pytest.raises(ValueError, match="rank must be >= 1"):
        lora.LoraConfig(rank=0, alpha=1.0)
    with pytest.raises(ValueError, match="unknown \\['lm_head'\\]"):
        lora.LoraConfig(rank=2, alpha=1.0, targets=("q", "lm_head"))
