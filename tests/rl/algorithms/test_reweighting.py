"""Token-level reweighters against NumPy references."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl.algorithms import advantages, reweighting
from rl.registry import RegistryError


def batch(seed=0, n=6, t=7):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, t + 1, n)
    lengths[0], lengths[1] = 1, 0  # length-1 and all-masked responses
    mask = np.arange(t)[None] < lengths[:, None]
    adv = rng.normal(size=n)
    old_logp = np.log(rng.uniform(0.01, 1.0, (n, t)))
    logp = old_logp + 0.3 * rng.normal(size=(n, t))
    return adv, mask, logp, old_logp


@pytest.mark.parametrize("form,weight", [
    ("linear", lambda p, c: 1 + c - c * p),
    ("normalize", lambda p, c: 1 / (1 + c - p)),
    ("focal", lambda p, c: (1 - p) ** c),
    ("reshape", lambda p, c: c * p + 1 - c),
])
def test_logp_reweight_forms(form, weight):
    adv, mask, _, old_logp = batch()
    got = advantages.reweight("logp_reweight", adv, mask, old_logp=old_logp, c=0.3, form=form)
    want = np.where(mask, adv[:, None] * weight(np.exp(old_logp), 0.3), 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_logp_reweight_upweights_low_probability_tokens():
    adv, mask = np.ones(1), np.ones((1, 3), bool)
    got = advantages.reweight("logp_reweight", adv, mask, old_logp=np.log([[0.01, 0.5, 1.0]]))
    np.testing.assert_allclose(got, [[1.2 - 0.2 * 0.01, 1.1, 1.0]], rtol=1e-6)


def ref_fipo(adv, mask, logp, old_logp, gamma, lo, hi, cap=4.0, delta_max=None):
    """FIPO as the authors' port (ms-swift `_compute_fipo_influence`): Δ_k = 0 where the
    ratio exceeds δ, then the discounted future sum, clipped, capped for risky tokens."""
    n, t = mask.shape
    raw = delta = np.where(mask, logp - old_logp, 0.0)
    if delta_max is not None:
        delta = np.where(np.exp(delta) > delta_max, 0.0, delta)
    f = np.ones((n, t))
    for i in range(n):
        for s in range(t):
            fk = sum(gamma ** (k - s) * delta[i, k] for k in range(s, t))
            f[i, s] = np.clip(np.exp(fk), lo, hi)
            if adv[i, s] < 0 and np.exp(raw[i, s]) > cap:
                f[i, s] = min(f[i, s], 1.0)
    return np.where(mask, adv * f, 0.0)


@pytest.mark.parametrize("high_only", [False, True])
@pytest.mark.parametrize("ratio_mask", [None, 10.0, 1.5])
def test_fipo_matches_reference(high_only, ratio_mask):
    adv, mask, logp, old_logp = batch(3)
    adv_t = np.broadcast_to(adv[:, None], mask.shape).copy()
    logp[2, 0] = old_logp[2, 0] + 2.0  # ratio > 4 on a token ...
    adv_t[2, 0] = -1.0                  # ... with a negative advantage
    logp[3, 1] = old_logp[3, 1] + 3.0  # ratio e^3 > δ = 10: its Δ is dropped from the sums
    adv_t[3, 1] = -1.0                  # ... and, with Â < 0, it is still a risky token
    gamma = 0.8
    got = advantages.reweight("fipo", adv_t, mask, logp=logp, old_logp=old_logp,
                              gamma=gamma, high_only=high_only, ratio_mask=ratio_mask)
    lo = 1.0 if high_only else 0.8
    want = ref_fipo(adv_t, mask, logp, old_logp, gamma, lo, 1.2, delta_max=ratio_mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fipo_defaults_are_the_authors():
    opts = reweighting.fipo_options()
    assert opts["high_only"] is True and opts["ratio_mask"] == 10.0
    assert opts["gamma"] == 2.0 ** (-1 / 32) and opts["clip_high"] == 1.2


def test_fipo_is_one_on_policy_and_stops_gradient():
    adv, mask, _, old_logp = batch(5)
    out = advantages.reweight("fipo", adv, mask, logp=old_logp, old_logp=old_logp)
    np.testing.assert_array_equal(out, np.where(mask, adv.astype(np.float32)[:, None], 0.0))
    grad = jax.grad(lambda lp: jnp.sum(advantages.reweight(
        "fipo", adv, mask, logp=lp, old_logp=old_logp)))(jnp.asarray(old_logp + 0.1))
    np.testing.assert_array_equal(grad, 0.0)


def test_divergence_weighted():
    adv, mask, _, _ = batch(7)
    js = np.random.default_rng(0).uniform(0, 0.5, mask.shape)
    got = advantages.reweight("divergence_weighted", adv, mask, token_divergence=js, alpha=0.5)
    mean = js[mask].mean()
    np.testing.assert_allclose(got, np.where(mask, adv[:, None] * (1 + 0.5 * js / mean), 0),
                               rtol=1e-5)
    zero = advantages.reweight("divergence_weighted", adv, mask,
                               token_divergence=np.zeros(mask.shape))
    np.testing.assert_allclose(zero, np.where(mask, adv[:, None], 0.0))
    with pytest.raises(ValueError, match="divergence must be one of"):
        advantages.reweight("divergence_weighted", adv, mask, token_divergence=js,
                            divergence="kl")


@pytest.mark.parametrize("quantile", [0.0, 0.2, 0.5, 0.9])
def test_delta_logp_mask_keeps_tokens_at_or_above_the_quantile(quantile):
    adv, mask, logp, old_logp = batch(9, n=10, t=9)
    got = np.asarray(advantages.reweight("delta_logp_mask", adv, mask, old_logp=logp,
                                         ref_logp=old_logp, quantile=quantile, step=20))
    delta = (logp - old_logp)[mask]
    threshold = np.quantile(delta, quantile)  # linear interpolation, as torch.quantile
    keep = mask & (logp - old_logp >= threshold)
    # q = 0.2 keeps the top 80% (the authors' q, not a top-20% selection)
    assert abs(keep.sum() - (1 - quantile) * mask.sum()) <= 1
    np.testing.assert_allclose(got, np.where(keep, adv[:, None], 0.0), rtol=1e-6)


def test_delta_logp_mask_waits_for_its_start_step():
    adv, mask, logp, old_logp = batch(9, n=10, t=9)
    run = lambda step: np.asarray(advantages.reweight(
        "delta_logp_mask", adv, mask, old_logp=logp, ref_logp=old_logp, step=step,
        start_step=5))
    np.testing.assert_allclose(run(4), np.where(mask, adv[:, None], 0.0), rtol=1e-6)
    assert (run(5) == 0).sum() > (run(4) == 0).sum()
    with pytest.raises(ValueError, match="method must be one of"):
        advantages.reweight("delta_logp_mask", adv, mask, old_logp=logp, ref_logp=old_logp,
                            method="drop")


def test_all_masked_and_jit():
    adv, mask, logp, old_logp = batch(1)
    empty = np.zeros_like(mask)
    for name, inputs in [("logp_reweight", {"old_logp": old_logp}),
                         ("fipo", {"logp": logp, "old_logp": old_logp}),
                         ("divergence_weighted", {"token_divergence": np.abs(logp)}),
                         ("delta_logp_mask", {"old_logp": logp, "ref_logp": old_logp})]:
        out = advantages.reweight(name, adv, empty, **inputs)
        np.testing.assert_array_equal(out, 0.0)
        eager = advantages.reweight(name, adv, mask, **inputs)
        jitted = jax.jit(functools.partial(advantages.reweight, name))(adv, mask, **inputs)
        np.testing.assert_allclose(eager, jitted, rtol=1e-6, err_msg=name)


def test_errors():
    adv, mask, _, old_logp = batch()
    with pytest.raises(RegistryError, match="unknown advantage reweighter 'fpo'"):
        advantages.reweight("fpo", adv, mask)
    with pytest.raises(RegistryError, match="no option 'gamma'"):
        advantages.reweight("logp_reweight", adv, mask, old_logp=old_logp, gamma=0.1)
    with pytest.raises(ValueError, match="form"):
        advantages.reweight("logp_reweight", adv, mask, old_logp=old_logp, form="cubic")
    with pytest.raises(ValueError, match="quantile"):
        reweighting.quantile_mask(jnp.zeros((1, 2)), jnp.ones((1, 2), bool), 1.5)
