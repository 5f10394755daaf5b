"""KL estimators and full-vocabulary divergences against float64 NumPy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl.algorithms import kl
from rl.registry import RegistryError


def ref_estimate(kind, logp, ref_logp, clamp=None):
    log_r = np.float64(ref_logp) - np.float64(logp)
    if clamp is not None:
        log_r = np.clip(log_r, -clamp, clamp)
    return {"k1": -log_r, "k2": 0.5 * log_r**2, "k3": np.exp(log_r) - 1 - log_r}[kind]


def _logps(seed, shape=(6, 9), scale=1.5):
    rng = np.random.default_rng(seed)
    logp = np.log(rng.uniform(0.01, 1.0, shape))
    return np.float32(logp), np.float32(logp + rng.normal(0, scale, shape))


def ref_log_softmax(x):
    x = np.float64(x)
    z = x - x.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_names_and_unknown_kind():
    assert kl.names() == ["k1", "k2", "k3"]
    with pytest.raises(RegistryError, match="k1, k2, k3"):
        kl.estimate("k4", np.zeros(3), np.zeros(3))


@pytest.mark.parametrize("clamp", [None, 0.7])
@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_estimate_matches_reference(kind, clamp):
    logp, ref_logp = _logps(0)
    want = ref_estimate(kind, logp, ref_logp, clamp)
    got = kl.estimate(kind, logp, ref_logp, clamp=clamp)
    assert got.shape == logp.shape and got.dtype == jnp.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    jitted = jax.jit(kl.estimate, static_argnums=0, static_argnames="clamp")
    np.testing.assert_allclose(jitted(kind, logp, ref_logp, clamp=clamp), got,
                               rtol=1e-6, atol=1e-7)
    if kind in ("k2", "k3"):
        assert np.all(np.asarray(got) >= 0)
    if kind == "k1":
        assert np.any(np.asarray(got) < 0)  # k1 can be negative
    if clamp is not None:  # bounded by the estimator at |log r| = clamp
        bound = max(abs(ref_estimate(kind, 0.0, c)) for c in (clamp, -clamp))
        assert np.all(np.abs(np.asarray(got)) <= bound + 1e-5)


def test_estimate_accepts_bf16_and_is_zero_on_policy():
    logp, _ = _logps(1)
    for kind in kl.names():
        np.testing.assert_array_equal(kl.estimate(kind, logp, logp), 0.0)
    bf16 = jnp.asarray(logp, jnp.bfloat16)
    got = kl.estimate("k3", bf16, logp - 0.5)
    np.testing.assert_allclose(got, ref_estimate("k3", np.float32(bf16), logp - 0.5),
                               rtol=1e-5, atol=1e-6)


def ref_kl_grads(theta, phi):
    """∇θ KL(π_θ‖ρ) and ∇θ KL(ρ‖π_θ) for π_θ = softmax(θ), ρ = softmax(φ), analytic."""
    log_pi, log_rho = ref_log_softmax(theta), ref_log_softmax(phi)
    pi, rho = np.exp(log_pi), np.exp(log_rho)
    ell = log_pi - log_rho
    forward = pi * (ell - np.sum(pi * ell))  # d/dθ_j sum_y π_y ℓ_y
    reverse = pi - rho  # d/dθ_j -sum_y ρ_y log π_y
    return forward, reverse, np.sum(pi * ell)


def _expected(kind, theta, ref_logp):
    """E_{y~π_θ}[k(y)] as a π-weighted sum over all outcomes, π held constant."""
    logp = jax.nn.log_softmax(theta)
    weights = jax.lax.stop_gradient(jnp.exp(logp))
    return jnp.sum(weights * kl.estimate(kind, logp, ref_logp))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_expected_estimator_gradients_on_policy(seed):
    rng = np.random.default_rng(seed)
    theta, phi = np.float32(rng.normal(0, 1.0, 5)), np.float32(rng.normal(0, 1.0, 5))
    forward, reverse, kl_value = ref_kl_grads(theta, phi)
    assert np.abs(forward).max() > 1e-2 and np.abs(reverse).max() > 1e-2
    ref_logp = jnp.asarray(ref_log_softmax(phi), jnp.float32)
    grads = {kind: np.asarray(jax.grad(_expected, argnums=1)(kind, theta, ref_logp))
             for kind in kl.names()}
    np.testing.assert_allclose(grads["k1"], 0.0, atol=1e-6)
    np.testing.assert_allclose(grads["k2"], forward, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads["k3"], reverse, rtol=1e-4, atol=1e-6)
    # k1 and k3 are unbiased for KL(π‖ρ) on-policy; k2 is not
    for kind in ("k1", "k3"):
        assert float(_expected(kind, theta, ref_logp)) == pytest.approx(kl_value, rel=1e-5)
    # the same through the full-vocabulary KL
    np.testing.assert_allclose(jax.grad(kl.full_kl)(theta, phi), forward, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(jax.grad(kl.full_kl, argnums=1)(phi, theta), reverse,
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_reward_penalty(kind):
    logp, ref_logp = _logps(3)
    mask = np.random.default_rng(4).random(logp.shape) < 0.6
    mask[0] = False
    got = kl.reward_penalty(kind, logp, ref_logp, mask, 0.05)
    want = np.where(mask, -0.05 * ref_estimate(kind, logp, ref_logp), 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    if kind != "k1":
        assert np.all(np.asarray(got) <= 0)
    # int and float masks behave like bool
    np.testing.assert_array_equal(kl.reward_penalty(kind, logp, ref_logp, mask.astype(int),
                                                    0.05), got)
    np.testing.assert_array_equal(kl.reward_penalty(kind, logp, ref_logp,
                                                    mask.astype(np.float32), 0.05), got)
    clamped = kl.reward_penalty(kind, logp, ref_logp, mask, 0.05, clamp=0.5)
    np.testing.assert_allclose(clamped, np.where(
        mask, -0.05 * ref_estimate(kind, logp, ref_logp, 0.5), 0.0), rtol=1e-5, atol=1e-7)
    # detached: no gradient flows to the policy or the reference
    for argnum in (1, 2):
        g = jax.grad(lambda *a: jnp.sum(kl.reward_penalty(*a)), argnums=argnum)(
            kind, jnp.asarray(logp), jnp.asarray(ref_logp), mask, 0.05)
        np.testing.assert_array_equal(g, 0.0)


def _logits(seed, shape=(2, 3, 7), scale=2.0):
    rng = np.random.default_rng(seed)
    return np.float32(rng.normal(0, scale, shape)), np.float32(rng.normal(0, scale, shape))


def test_full_kl_and_entropy_match_reference():
    p_logits, q_logits = _logits(5)
    logp, logq = ref_log_softmax(p_logits), ref_log_softmax(q_logits)
    got = kl.full_kl(p_logits, q_logits)
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, np.sum(np.exp(logp) * (logp - logq), -1), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(kl.full_kl(p_logits, p_logits), 0.0, atol=1e-6)
    assert np.all(np.asarray(got) > 0)
    ent = kl.entropy(p_logits)
    assert ent.shape == (2, 3)
    np.testing.assert_allclose(ent, -np.sum(np.exp(logp) * logp, -1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kl.entropy(np.zeros((4, 7), np.float32)), np.log(7), rtol=1e-6)
    assert kl.entropy(jnp.asarray(p_logits, jnp.bfloat16)).dtype == jnp.float32
    np.testing.assert_allclose(jax.jit(kl.full_kl)(p_logits, q_logits), got, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(kl.entropy)(p_logits), ent, rtol=1e-6)


def test_js_divergence():
    p_logits, q_logits = _logits(6)
    p, q = np.exp(ref_log_softmax(p_logits)), np.exp(ref_log_softmax(q_logits))
    m = 0.5 * (p + q)
    want = 0.5 * np.sum(p * np.log(p / m), -1) + 0.5 * np.sum(q * np.log(q / m), -1)
    got = kl.js_divergence(p_logits, q_logits)
    assert got.shape == (2, 3)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kl.js_divergence(q_logits, p_logits), got, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(kl.js_divergence(p_logits, p_logits), 0.0, atol=1e-6)
    assert np.all((np.asarray(got) > 0) & (np.asarray(got) <= np.log(2)))
    # disjoint supports reach log 2 and never exceed it
    disjoint_p = np.where(np.arange(6) < 3, 40.0, -40.0).astype(np.float32)
    disjoint = float(kl.js_divergence(disjoint_p, -disjoint_p))
    assert disjoint == pytest.approx(np.log(2), rel=1e-5) and disjoint <= np.log(2) + 1e-6
    np.testing.assert_allclose(jax.jit(kl.js_divergence)(p_logits, q_logits), got, rtol=1e-6)
