"""Policy losses against an independent float64 NumPy reference of the documented formulas.

The reference (`ref_compute`) mirrors `rl.algorithms.losses.compute`'s signature and returns
(loss, d loss / d logp, metrics); it is written from the module docstring only and is
shared with test_losses_gradients.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl.algorithms import losses, off_policy
from rl.registry import RegistryError
from tests.rl.algorithms import test_bapo, test_off_policy
from tests.tolerances import fp32_atol

# (agg, agg options): every documented aggregation, norm_length, agg_norm overrides
AGGS = [("token_mean", {}), ("seq_mean_token_mean", {}), ("seq_mean_token_sum", {}),
        ("seq_mean_token_sum_norm", {}), ("seq_mean_token_sum_norm", {"norm_length": 16.0}),
        ("token_mean", {"agg_norm": 50.0}), ("seq_mean_token_mean", {"agg_norm": 20.0})]
AGG_IDS = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "sum_norm",
           "sum_norm_16", "token_mean_norm50", "seq_mean_norm20"]
_BOUNDS = {"eps_low": 0.2, "eps_high": 0.28, "delta_low": 0.1, "delta_high": 0.1,
           "keep_prob": 0.3}
# config id -> (loss name, options); covers every registered loss (test_configs_cover_names)
CONFIGS = {
    "ppo": ("ppo", {"eps_low": 0.2, "eps_high": 0.28}),
    "ppo_dual": ("ppo", {"eps_low": 0.2, "eps_high": 0.2, "dual_clip": 3.0}),
    "gspo": ("gspo", {"eps_low": 0.1, "eps_high": 0.1}),
    "gspo_token": ("gspo_token", {"eps_low": 0.1, "eps_high": 0.1}),
    "nsr_decay": ("nsr", dict(mode="decay", **_BOUNDS)),
    "nsr_stochastic": ("nsr", dict(mode="stochastic", **_BOUNDS)),
    "nsr_decay_dual": ("nsr", dict(mode="decay", dual_clip=3.0, **_BOUNDS)),
    "cispo": ("cispo", {"eps_high": 0.28}),
    "cispo_low": ("cispo", {"eps_low": 0.2, "eps_high": 0.28}),
    "bapo": ("bapo", {"target": 0.45, "low_step": 0.1, "high_step": 0.25}),
    "bapo_high_first_paper": ("bapo", {"target": 0.6, "order": "high_first",
                                       "measure": "paper", "dual_clip": 2.0}),
}
# documented option defaults (the loss signatures / module docstring)
DEFAULTS = {"ppo": {"eps_low": 0.2, "eps_high": 0.2},
            "gspo": {"eps_low": 3e-4, "eps_high": 4e-4},
            "gspo_token": {"eps_low": 3e-4, "eps_high": 4e-4},
            "nsr": {"eps_low": 0.2, "eps_high": 0.28, "delta_low": 0.1, "delta_high": 0.1,
                    "keep_prob": 0.5, "mode": "stochastic"},
            "cispo": {"eps_low": None, "eps_high": 0.28},
            "bapo": test_bapo.PAPER}
# ratio centres, jittered by ±1%: never within 1% of a clip/band/dual boundary above
CENTERS = (0.3, 0.65, 0.75, 0.9, 1.0, 1.1, 1.24, 1.33, 1.5, 4.0)
CENTER_P = (0.08, 0.08, 0.14, 0.08, 0.08, 0.08, 0.08, 0.14, 0.08, 0.16)  # nsr band, dual: more


def make_batch(seed, n=10, t=8, token_adv=False):
    """float32 (logp, old_logp, adv, mask): empty row 0, length-1 row 1, full row 2."""
    rng = np.random.default_rng(seed)
    mask = rng.random((n, t)) < 0.75
    mask[0] = False
    mask[1] = False
    mask[1, rng.integers(t)] = True
    mask[2] = True
    logp = np.log(rng.uniform(0.05, 0.95, (n, t)))
    ratio = rng.choice(CENTERS, (n, t), p=CENTER_P) * rng.uniform(0.99, 1.01, (n, t))
    adv = rng.normal(size=(n, t) if token_adv else n)
    adv[rng.random(adv.shape) < 0.25] = 0.0
    adv[3] = 0.0
    f32 = np.float32
    return f32(logp), f32(logp - np.log(ratio)), f32(adv), mask


def rng_for(config, seed):
    """A PRNG key for stochastic nsr, else None (the other losses take no rng)."""
    return jax.random.PRNGKey(seed) if config[1].get("mode") == "stochastic" else None


def keep_draw(key, keep_prob, shape):
    return None if key is None else np.asarray(jax.random.bernoulli(key, keep_prob, shape))


def ref_aggregate(x, mask, agg, agg_norm=None, norm_length=None):
    x = np.where(mask, np.asarray(x, np.float64), 0.0)
    lengths = mask.sum(1)
    rows = [i for i in range(x.shape[0]) if lengths[i] > 0]
    if agg == "token_mean":
        total, count = x.sum(), lengths.sum()
    elif agg == "seq_mean_token_mean":
        total, count = sum(x[i].sum() / lengths[i] for i in rows), len(rows)
    elif agg == "seq_mean_token_sum":
        total, count = sum(x[i].sum() for i in rows), len(rows)
    else:
        norm = x.shape[1] if norm_length is None else norm_length
        total, count = sum(x[i].sum() / norm for i in rows), len(rows)
    count = count if agg_norm is None else agg_norm
    return total / count if count else 0.0


def ref_agg_weights(mask, agg, **kw):
    """d aggregate / d x: the aggregate is linear, so evaluate it on unit vectors."""
    w = np.zeros(mask.shape)
    for idx in np.ndindex(mask.shape):
        unit = np.zeros(mask.shape)
        unit[idx] = 1.0
        w[idx] = ref_aggregate(unit, mask, agg, **kw)
    return w


def _masked_mean(x, mask):
    return float(np.mean(x[mask])) if mask.any() else 0.0


def ref_token_loss(name, logp, old, adv, mask, keep=None, *, eps_low=None, eps_high=None,
                   dual_clip=None, delta_low=None, delta_high=None, keep_prob=None,
                   mode=None):
    """(loss [N,T], d loss/d logp [N,T] (gspo: d loss/d s), indicators) in float64."""
    r = np.exp(logp - old)
    lengths = mask.sum(1, keepdims=True)
    s = np.exp(np.where(mask, logp - old, 0.0).sum(1, keepdims=True) / np.maximum(lengths, 1))
    zeros = np.zeros(mask.shape, bool)
    if name == "cispo":
        low = 0.0 if eps_low is None else 1.0 - eps_low
        w = np.clip(r, low, 1.0 + eps_high)
        return -w * adv, -w * adv, {"clip_low": r < low, "clip_high": r > 1 + eps_high,
                                    "clip_dual": zeros}
    ratio = np.broadcast_to(s, mask.shape) if name.startswith("gspo") else r
    loss = -np.minimum(ratio * adv, np.clip(ratio, 1 - eps_low, 1 + eps_high) * adv)
    ind = {"clip_low": (adv < 0) & (ratio < 1 - eps_low),
           "clip_high": (adv > 0) & (ratio > 1 + eps_high), "clip_dual": zeros}
    d_ratio = np.where(ind["clip_low"] | ind["clip_high"], 0.0, -adv)
    if dual_clip is not None:
        ind["clip_dual"] = (adv < 0) & (ratio > dual_clip)
        loss = np.where(adv < 0, np.minimum(loss, -dual_clip * adv), loss)
        d_ratio = np.where(ind["clip_dual"], 0.0, d_ratio)
    if name == "nsr":
        band = (((adv > 0) & (r > 1 + eps_high) & (r <= 1 + eps_high + delta_high))
                | ((adv < 0) & (r < 1 - eps_low) & (r >= 1 - eps_low - delta_low)))
        if mode == "decay":
            loss = np.where(band, keep_prob * -r * adv + (1 - keep_prob) * loss, loss)
            d_ratio = np.where(band, -keep_prob * adv, d_ratio)
            rescued = band * keep_prob
        else:
            rescued = band & keep
            loss = np.where(rescued, -r * adv, loss)
            d_ratio = np.where(rescued, -adv, d_ratio)
        ind.update(nsr_band=band, nsr_rescued=rescued)
    if name == "gspo":
        return loss, d_ratio, ind  # chain rule through s is applied by ref_compute
    return loss, d_ratio * (s if name == "gspo_token" else r), ind


def ref_compute(name, logp, old, adv, mask, keep=None, *, agg=None, agg_norm=None,
                norm_length=None, behavior_logp=None, off_policy=None,
                ref_logp=None, kl_coef=0.0, kl_kind="k3", kl_clamp=None, entropy=None,
                entropy_coef=0.0, **options):
    """(loss, d loss/d logp [N,T], metrics) of rl.algorithms.losses.compute, in float64.
    `off_policy`: (correction, level, cap, floor) of test_off_policy.ref_correct."""
    logp, old = np.float64(logp), np.float64(old)
    mask = np.asarray(mask, bool)
    metrics = {}
    is_w = np.ones(mask.shape)
    if behavior_logp is not None:
        is_w, mask, metrics = test_off_policy.ref_correct(
            *(off_policy or ("", "token", 2.0, None)), old, behavior_logp, logp, mask)
    adv = np.float64(adv)
    adv = np.where(mask, adv[:, None] if adv.ndim == 1 else adv, 0.0)
    agg = agg or ("seq_mean_token_mean" if name.startswith("gspo") else "token_mean")
    agg_kw = {"agg_norm": agg_norm, "norm_length": norm_length}
    weights = ref_agg_weights(mask, agg, **agg_kw)
    if name == "bapo":
        loss, d_loss, ind = test_bapo.ref_token_loss(logp, old, adv, mask, **options)
        metrics.update({k: v for k, v in ind.items() if k.startswith("bapo_")})
    else:
        loss, d_loss, ind = ref_token_loss(name, logp, old, adv, mask, keep, **options)
    pg = ref_aggregate(loss * is_w, mask, agg, **agg_kw)
    grad = weights * is_w * d_loss
    if name == "gspo":  # every token of row i moves s_i: d s_i / d logp_{i,t} = s_i M / |y_i|
        lengths = np.maximum(mask.sum(1, keepdims=True), 1)
        s = np.exp(np.where(mask, logp - old, 0.0).sum(1, keepdims=True) / lengths)
        grad = mask * s / lengths * grad.sum(1, keepdims=True)
    value = pg
    if ref_logp is not None:
        raw = np.float64(ref_logp) - logp
        log_r = raw if kl_clamp is None else np.clip(raw, -kl_clamp, kl_clamp)
        inside = np.abs(raw) < (np.inf if kl_clamp is None else kl_clamp)
        kl, d_kl = {"k1": (-log_r, 1.0 * inside),
                    "k2": (0.5 * log_r**2, -log_r * inside),
                    "k3": (np.exp(log_r) - 1 - log_r, (1 - np.exp(log_r)) * inside)}[kl_kind]
        metrics["kl"] = ref_aggregate(kl, mask, agg, **agg_kw)
        value += kl_coef * metrics["kl"]
        grad = grad + kl_coef * weights * d_kl
    if entropy is not None:
        metrics["entropy"] = ref_aggregate(entropy, mask, agg, **agg_kw)
        value -= entropy_coef * metrics["entropy"]
    r = np.exp(logp - old)
    metrics.update(
        loss=value, pg_loss=pg, ratio_mean=_masked_mean(r, mask),
        ratio_min=float(r[mask].min()) if mask.any() else 0.0,
        ratio_max=float(r[mask].max()) if mask.any() else 0.0,
        approx_kl=_masked_mean(np.exp(old - logp) - 1 - (old - logp), mask),
        **{f"clip_frac_{k}": _masked_mean(ind[f"clip_{k}"], mask)
           for k in ("low", "high", "dual")})
    if name == "nsr":
        metrics.update(nsr_band_frac=_masked_mean(ind["nsr_band"], mask),
                       nsr_rescued_frac=_masked_mean(ind["nsr_rescued"], mask))
    return value, grad * mask, metrics


def jax_compute(name, logp, old, adv, mask, rng=None, **kw):
    """(loss, d loss / d logp, metrics) from rl.algorithms.losses.compute, as numpy."""
    def f(lp):
        return losses.compute(name, lp, old, adv, mask, rng, **kw)
    (value, metrics), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(logp))
    return float(value), np.asarray(grad), {k: float(v) for k, v in metrics.items()}


def check_metrics(got, want, rtol=1e-5, atol=1e-6):
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=rtol, atol=atol, err_msg=key)


def test_configs_cover_names():
    assert {name for name, _ in CONFIGS.values()} == set(losses.names())
    assert set(DEFAULTS) == set(losses.names())


@pytest.mark.parametrize("token_adv", [False, True], ids=["adv_N", "adv_NT"])
@pytest.mark.parametrize("agg,agg_kw", AGGS, ids=AGG_IDS)
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_loss_and_gradient_match_reference(config, agg, agg_kw, token_adv):
    name, options = CONFIGS[config]
    seed = sum(map(ord, config + agg)) + token_adv
    logp, old, adv, mask = make_batch(seed, token_adv=token_adv)
    rng = rng_for(CONFIGS[config], seed)
    keep = keep_draw(rng, options.get("keep_prob"), mask.shape)
    value, grad, metrics = jax_compute(name, logp, old, adv, mask, rng, agg=agg, **agg_kw,
                                       **options)
    want, want_grad, want_metrics = ref_compute(name, logp, old, adv, mask, keep, agg=agg,
                                                **agg_kw, **options)
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)
    check_metrics(metrics, want_metrics)


@pytest.mark.parametrize("shape", [(10, 8), (6, 1)], ids=["10x8", "6x1"])
@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_default_options_and_aggregation(name, shape):
    logp, old, adv, mask = make_batch(7, *shape)
    rng = jax.random.PRNGKey(3)
    keep = keep_draw(rng, 0.5, mask.shape)
    value, grad, metrics = jax_compute(name, logp, old, adv, mask, rng)
    want, want_grad, want_metrics = ref_compute(name, logp, old, adv, mask, keep,
                                                **DEFAULTS[name])
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)
    check_metrics(metrics, want_metrics)


@pytest.mark.parametrize("agg,agg_kw", AGGS, ids=AGG_IDS)
def test_aggregate_matches_reference(agg, agg_kw):
    x = np.random.default_rng(0).normal(size=(10, 8)).astype(np.float32)
    _, _, _, mask = make_batch(1)
    got = losses.aggregate(jnp.asarray(x), jnp.asarray(mask), agg, **agg_kw)
    np.testing.assert_allclose(got, ref_aggregate(x, mask, agg, **agg_kw), rtol=1e-5)
    empty = losses.aggregate(jnp.asarray(x), jnp.zeros((10, 8), bool), agg)
    assert float(empty) == 0.0


@pytest.mark.parametrize("correction", ["", "tis", "mis"])
@pytest.mark.parametrize("config", ["ppo", "gspo", "cispo", "bapo"])
def test_off_policy_correction(config, correction):
    # token level (the levels themselves: test_off_policy.py); mis also changes the
    # mask every loss and aggregation sees
    name, options = CONFIGS[config]
    logp, old, adv, mask = make_batch(11, token_adv=True)
    rng = np.random.default_rng(12)
    is_ratio = rng.choice([0.3, 0.9, 1.0, 1.5, 2.5, 4.0], mask.shape)  # [1/2, 2]: no ties
    behavior = np.float32(old - np.log(is_ratio))
    c = off_policy.Correction(correction)
    value, grad, metrics = jax_compute(name, logp, old, adv, mask, behavior_logp=behavior,
                                       off_policy=c, **options)
    want, want_grad, want_metrics = ref_compute(
        name, logp, old, adv, mask, behavior_logp=behavior,
        off_policy=(correction, "token", 2.0, None), **options)
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)
    check_metrics(metrics, want_metrics)
    assert (0 < want_metrics["corrected_frac"] < 1) == bool(correction)


@pytest.mark.parametrize("kl_clamp", [None, 0.5])
@pytest.mark.parametrize("kl_kind", ["k1", "k2", "k3"])
@pytest.mark.parametrize("config", ["ppo", "gspo_token"])
def test_kl_and_entropy_terms(config, kl_kind, kl_clamp):
    name, options = CONFIGS[config]
    logp, old, adv, mask = make_batch(21)
    rng = np.random.default_rng(22)
    ref_logp = np.float32(logp + rng.normal(0, 0.7, mask.shape))
    entropy = np.float32(rng.uniform(0, 3, mask.shape))
    kw = dict(ref_logp=ref_logp, kl_coef=0.3, kl_kind=kl_kind, kl_clamp=kl_clamp,
              entropy=entropy, entropy_coef=0.01, **options)
    value, grad, metrics = jax_compute(name, logp, old, adv, mask, **kw)
    want, want_grad, want_metrics = ref_compute(name, logp, old, adv, mask, **kw)
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)
    check_metrics(metrics, want_metrics)
    no_extra, _, _ = jax_compute(name, logp, old, adv, mask, **options)
    np.testing.assert_allclose(
        value, no_extra + 0.3 * want_metrics["kl"] - 0.01 * want_metrics["entropy"],
        rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_fipo_on_policy_is_identity(name):
    logp, _, adv, mask = make_batch(31, token_adv=True)
    rng = jax.random.PRNGKey(0)
    plain = jax_compute(name, logp, logp, adv, mask, rng)
    fipo = jax_compute(name, logp, logp, adv, mask, rng, reweight="fipo",
                       reweight_options={"gamma": 0.9})
    assert fipo[0] == plain[0]
    np.testing.assert_array_equal(fipo[1], plain[1])


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_metrics_match_reference(config):
    name, options = CONFIGS[config]
    logp, old, adv, mask = make_batch(42, token_adv=True)
    rng = rng_for(CONFIGS[config], 5)
    keep = keep_draw(rng, options.get("keep_prob"), mask.shape)
    _, _, metrics = jax_compute(name, logp, old, adv, mask, rng, **options)
    _, _, want = ref_compute(name, logp, old, adv, mask, keep, **options)
    check_metrics(metrics, want)
    if name in ("ppo", "nsr"):
        assert want["clip_frac_low"] > 0 and want["clip_frac_high"] > 0
    if name == "nsr":
        assert want["nsr_band_frac"] > 0 and want["nsr_rescued_frac"] > 0
    if options.get("dual_clip"):
        assert want["clip_frac_dual"] > 0


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_all_masked_batch_is_finite_and_zero(config):
    name, options = CONFIGS[config]
    logp, old, adv, _ = make_batch(51, token_adv=True)
    mask = np.zeros(logp.shape, bool)
    rng = jax.random.PRNGKey(0)
    for agg, agg_kw in AGGS:
        value, grad, metrics = jax_compute(name, logp, old, adv, mask, rng, agg=agg, **agg_kw,
                                           behavior_logp=old, ref_logp=logp, kl_coef=0.1,
                                           entropy=np.ones_like(logp), entropy_coef=0.1,
                                           **options)
        assert value == 0.0
        np.testing.assert_array_equal(grad, 0.0)
        assert all(np.isfinite(v) for v in metrics.values()), metrics
        # bapo's bounds stay at their start (share 1: no negative tokens to balance)
        assert all(v == 0.0 for k, v in metrics.items() if not k.startswith("bapo_")), metrics


def test_log_ratio_is_clamped_at_20():
    logp, old, adv, mask = make_batch(71)
    old[2, 0] = logp[2, 0] - 50.0  # row 2 is fully unmasked
    for name in losses.names():
        value, grad, metrics = jax_compute(name, logp, old, adv, mask, jax.random.PRNGKey(0))
        assert np.isfinite(value) and np.all(np.isfinite(grad)), name
        assert metrics["ratio_max"] == pytest.approx(np.exp(20.0), rel=1e-5)


@pytest.mark.parametrize("name", losses.names())
def test_jit_matches_eager(name):
    logp, old, adv, mask = make_batch(61, token_adv=True)
    rng = jax.random.PRNGKey(1)
    kw = {"ref_logp": logp - 0.1, "kl_coef": 0.1, "behavior_logp": old + 0.2}

    def f(lp, key):
        return losses.compute(name, lp, old, adv, mask, key, **kw)

    eager = jax.value_and_grad(f, has_aux=True)(logp, rng)
    jitted = jax.jit(jax.value_and_grad(f, has_aux=True))(logp, rng)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
        # fused vs op-by-op may sum in another order; longest sum: the batch's tokens
        np.testing.assert_allclose(a, b, atol=fp32_atol(b, logp.size), rtol=0)


def test_unknown_loss_name_lists_registered():
    logp, old, adv, mask = make_batch(0)
    with pytest.raises(RegistryError) as err:
        losses.compute("pp0", logp, old, adv, mask)
    assert "pp0" in str(err.value)
    assert all(name in str(err.value) for name in losses.names())


def test_unknown_option_is_named():
    logp, old, adv, mask = make_batch(0)
    with pytest.raises(RegistryError, match="eps_hgh"):
        losses.compute("ppo", logp, old, adv, mask, eps_hgh=0.1)


def test_bad_aggregation_and_missing_inputs():
    logp, old, adv, mask = make_batch(0)
    with pytest.raises(ValueError, match="token_means"):
        losses.compute("ppo", logp, old, adv, mask, agg="token_means")
    with pytest.raises(ValueError, match="ref_logp"):
        losses.compute("ppo", logp, old, adv, mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="rng"):
        losses.compute("nsr", logp, old, adv, mask, mode="stochastic")
