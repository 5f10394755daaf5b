"""Gradients of the policy losses w.r.t. logp against analytic NumPy gradients.

The generic value + gradient sweep over every loss and aggregation is
test_losses.py::test_loss_and_gradient_match_reference; these are the
loss-specific claims of the module docstring.
"""

import jax
import numpy as np
import pytest

from rl.algorithms import losses
from tests.rl.algorithms.test_losses import (
    _BOUNDS,
    jax_compute,
    make_batch,
    ref_agg_weights,
    ref_compute,
)


def _broadcast(adv, mask):
    adv = np.float64(adv)
    return np.where(mask, adv[:, None] if adv.ndim == 1 else adv, 0.0)


def _ratio(logp, old):
    return np.exp(np.float64(logp) - np.float64(old))


@pytest.mark.parametrize("dual_clip", [None, 3.0], ids=["no_dual", "dual3"])
@pytest.mark.parametrize("token_adv", [False, True], ids=["adv_N", "adv_NT"])
@pytest.mark.parametrize("seed", [0, 1])
def test_ppo_gradient_exactly_zero_where_clipped(seed, token_adv, dual_clip):
    logp, old, adv, mask = make_batch(100 + seed, token_adv=token_adv)
    opts = {"eps_low": 0.2, "eps_high": 0.28, "dual_clip": dual_clip}
    _, grad, _ = jax_compute("ppo", logp, old, adv, mask, **opts)
    r, a = _ratio(logp, old), _broadcast(adv, mask)
    clipped = ((a > 0) & (r > 1.28)) | ((a < 0) & (r < 0.8))
    if dual_clip is not None:
        clipped |= (a < 0) & (r > dual_clip)
        assert ((a < 0) & (r > dual_clip) & mask).any()
    assert (clipped & mask).any() and (~clipped & mask & (a != 0)).any()
    want = np.where(clipped, 0.0, -r * a) / mask.sum()  # token_mean denominator
    np.testing.assert_allclose(grad, want * mask, rtol=1e-5, atol=1e-7)
    assert np.all(grad[clipped | ~mask | (a == 0)] == 0.0)
    assert np.all(grad[~clipped & mask & (a != 0)] != 0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gspo_token_equals_gspo_for_sequence_advantages(seed):
    logp, old, adv, mask = make_batch(200 + seed)
    kw = {"agg": "seq_mean_token_mean", "eps_low": 0.1, "eps_high": 0.1}
    value, grad, metrics = jax_compute("gspo", logp, old, adv, mask, **kw)
    value_tok, grad_tok, metrics_tok = jax_compute("gspo_token", logp, old, adv, mask, **kw)
    np.testing.assert_allclose(value_tok, value, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(grad_tok, grad, rtol=1e-5, atol=1e-7)
    assert metrics_tok == pytest.approx(metrics, rel=1e-6, abs=1e-7)
    want, want_grad, _ = ref_compute("gspo", logp, old, adv, mask, **kw)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["gspo", "gspo_token"])
def test_gspo_sequence_gradient_closed_form(name):
    logp, old, adv, mask = make_batch(210)
    lengths = mask.sum(1)
    num_seqs = (lengths > 0).sum()
    log_s = np.where(mask, np.float64(logp) - np.float64(old), 0).sum(1) / np.maximum(lengths, 1)
    s = np.exp(log_s)
    # eps wide enough that no sequence is clipped: d/dlogp_t = -s_i A_i / (|y_i| N_seq)
    _, grad, _ = jax_compute(name, logp, old, adv, mask, eps_low=0.99, eps_high=100.0)
    want = -(s * adv / np.maximum(lengths, 1) / num_seqs)[:, None] * mask
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-7)
    # the default (tight) bounds clip whole sequences: their gradient is exactly zero
    _, grad, _ = jax_compute(name, logp, old, adv, mask)
    clipped = ((adv > 0) & (s > 1 + 4e-4)) | ((adv < 0) & (s < 1 - 3e-4))
    assert clipped.any() and (~clipped & (adv != 0) & (lengths > 0)).any()
    assert np.all(grad[clipped] == 0.0)
    np.testing.assert_allclose(grad[~clipped], want[~clipped], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("eps_low", [None, 0.2])
@pytest.mark.parametrize("token_adv", [False, True], ids=["adv_N", "adv_NT"])
def test_cispo_every_token_keeps_gradient(token_adv, eps_low):
    logp, old, adv, mask = make_batch(300, token_adv=token_adv)
    value, grad, _ = jax_compute("cispo", logp, old, adv, mask, eps_low=eps_low,
                                 eps_high=0.28)
    r, a = _ratio(logp, old), _broadcast(adv, mask)
    w = np.clip(r, 0.0 if eps_low is None else 1 - eps_low, 1.28)
    np.testing.assert_allclose(value, np.sum(-w * a * mask) / mask.sum(), rtol=1e-5)
    np.testing.assert_allclose(grad, -w * a * mask / mask.sum(), rtol=1e-5, atol=1e-7)
    live = mask & (a != 0)
    assert (live & (r > 3.0)).any() and (live & (r < 0.5)).any()
    assert np.all(grad[live] != 0.0)
    assert np.all(grad[~live] == 0.0)


def _band(logp, old, adv, mask, eps_low=0.2, eps_high=0.28, delta_low=0.1, delta_high=0.1):
    r, a = _ratio(logp, old), _broadcast(adv, mask)
    return (((a > 0) & (r > 1 + eps_high) & (r <= 1 + eps_high + delta_high))
            | ((a < 0) & (r < 1 - eps_low) & (r >= 1 - eps_low - delta_low)))


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean"])
@pytest.mark.parametrize("token_adv", [False, True], ids=["adv_N", "adv_NT"])
def test_nsr_decay_gradient(token_adv, agg):
    logp, old, adv, mask = make_batch(400, token_adv=token_adv)
    opts = dict(_BOUNDS, agg=agg)
    keep_prob = opts.pop("keep_prob")
    _, grad, _ = jax_compute("nsr", logp, old, adv, mask, mode="decay", keep_prob=keep_prob,
                             **opts)
    _, ppo_grad, _ = jax_compute("ppo", logp, old, adv, mask, eps_low=0.2, eps_high=0.28,
                                 agg=agg)
    band = _band(logp, old, adv, mask)
    assert band.sum() >= 3
    np.testing.assert_allclose(grad[~band], ppo_grad[~band], rtol=1e-6, atol=1e-8)
    assert np.all(ppo_grad[band] == 0.0)
    unclipped = -_ratio(logp, old) * _broadcast(adv, mask) * ref_agg_weights(mask, agg)
    np.testing.assert_allclose(grad[band], keep_prob * unclipped[band], rtol=1e-5, atol=1e-8)


def test_nsr_stochastic_gradient_is_unbiased():
    logp, old, adv, mask = make_batch(500, token_adv=True)
    opts = dict(_BOUNDS)
    keep_prob, num_keys = opts["keep_prob"], 2000

    def grad_fn(key):
        def f(lp):
            return losses.compute("nsr", lp, old, adv, mask, key, mode="stochastic", **opts)[0]
        return jax.grad(f)(logp)

    keys = jax.random.split(jax.random.PRNGKey(0), num_keys)
    draws = np.asarray(jax.jit(jax.vmap(grad_fn))(keys), np.float64)
    _, decay, _ = jax_compute("nsr", logp, old, adv, mask, mode="decay", **opts)
    band = _band(logp, old, adv, mask)
    assert band.sum() >= 4
    unclipped = -_ratio(logp, old) * _broadcast(adv, mask) / mask.sum()
    # a draw in the band is the clipped gradient (0) or the unclipped one
    rescued = np.isclose(draws[:, band], unclipped[band], rtol=1e-5, atol=0)
    assert np.all(rescued | (draws[:, band] == 0.0))
    assert abs(rescued.mean() - keep_prob) < 5 * np.sqrt(keep_prob * (1 - keep_prob)
                                                           / rescued.size)
    np.testing.assert_allclose(draws[:, ~band], np.broadcast_to(decay[~band],
                                                                draws[:, ~band].shape),
                               rtol=1e-6, atol=1e-8)
    stderr = np.abs(unclipped) * np.sqrt(keep_prob * (1 - keep_prob) / num_keys)
    assert np.all(np.abs(draws.mean(0) - decay) <= 5 * stderr + 1e-7)


def test_nsr_rescued_metrics():
    logp, old, adv, mask = make_batch(600, token_adv=True)
    band = _band(logp, old, adv, mask)
    band_frac = band[mask].mean()
    assert band_frac > 0
    opts = dict(_BOUNDS)
    _, _, decay = jax_compute("nsr", logp, old, adv, mask, mode="decay", **opts)
    assert decay["nsr_band_frac"] == pytest.approx(band_frac, rel=1e-6)
    assert decay["nsr_rescued_frac"] == pytest.approx(opts["keep_prob"] * band_frac, rel=1e-6)
    key = jax.random.PRNGKey(9)
    keep = np.asarray(jax.random.bernoulli(key, opts["keep_prob"], mask.shape))
    _, _, stochastic = jax_compute("nsr", logp, old, adv, mask, key, mode="stochastic", **opts)
    assert stochastic["nsr_band_frac"] == pytest.approx(band_frac, rel=1e-6)
    assert stochastic["nsr_rescued_frac"] == pytest.approx((band & keep)[mask].mean(), rel=1e-6)


def test_nsr_option_errors():
    logp, old, adv, mask = make_batch(0)
    with pytest.raises(ValueError, match="rng"):
        losses.compute("nsr", logp, old, adv, mask, mode="stochastic")
    with pytest.raises(ValueError, match="mode"):
        losses.compute("nsr", logp, old, adv, mask, jax.random.PRNGKey(0), mode="sometimes")
    with pytest.raises(ValueError, match="keep_prob"):
        losses.compute("nsr", logp, old, adv, mask, mode="decay", keep_prob=1.5)
