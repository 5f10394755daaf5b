"""rl.algorithms.off_policy against a float64 NumPy reference written from the module
docstring: the behaviour weight at each level × correction, the interpolated proximal
policy, the metrics (masked quantiles included), and how the loss uses them.

`ref_correct` is shared with test_losses.py (every loss × correction)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl.algorithms import losses, off_policy
from tests.tolerances import F32_EPS

LEVELS = ("token", "sequence", "geometric")
CORRECTIONS = ("", "tis", "mis")
# the float32 weight is exp of a sum of at most T = 8 log-ratios of size <= ~3: its
# relative error is about T·eps·3 = 3e-6 (exp turns an absolute log error into a
# relative one); 1e-5 leaves room
RTOL = 1e-5


def ref_floor(correction, cap, floor):
    if floor is not None:
        return floor
    return 1.0 / cap if correction == "mis" else 0.0


def ref_raw_weight(level, prox, behav, mask):
    """[N, T] π_prox/π_behav at `level`, float64 (log-ratio clamped to ±20)."""
    log_ratio = np.where(mask, np.float64(prox) - np.float64(behav), 0.0)
    lengths = mask.sum(1, keepdims=True)
    per_row = {"token": log_ratio,
               "sequence": log_ratio.sum(1, keepdims=True),
               "geometric": log_ratio.sum(1, keepdims=True) / np.maximum(lengths, 1)}[level]
    return np.broadcast_to(np.exp(np.clip(per_row, -20, 20)), mask.shape)


def ref_correct(correction, level, cap, floor, prox, behav, logp, mask):
    """(weight [N, T], kept mask [N, T], metrics) of off_policy.apply, float64."""
    mask = np.asarray(mask, bool)
    w = ref_raw_weight(level, prox, behav, mask)
    lo = ref_floor(correction, cap, floor)
    outside = (w < lo) | (w > cap)
    if correction == "tis":
        weight, kept = np.clip(w, lo, cap), mask
    elif correction == "mis":
        kept = mask & ~outside
        weight = np.where(kept, w, 0.0)
    else:
        weight, kept, outside = np.ones(mask.shape), mask, np.zeros(mask.shape, bool)
    values = w[mask]
    log_rho = np.float64(logp) - np.float64(behav)  # samples of π_behav: ρ = π_θ/π_behav

    def mean(x):
        return float(np.mean(x[mask])) if mask.any() else 0.0

    metrics = {"is_weight_mean": mean(w), "corrected_frac": mean(outside),
               "kl_behavior_current": mean(-log_rho),
               "kl_behavior_current_k3": mean(np.exp(log_rho) - 1 - log_rho),
               "is_weight_max": float(values.max()) if mask.any() else 0.0}
    for name, q in (("is_weight_p50", 0.5), ("is_weight_p90", 0.9), ("is_weight_p99", 0.99)):
        metrics[name] = float(np.quantile(values, q)) if mask.any() else 0.0
    return weight, kept, metrics


def make_streams(seed, n=10, t=8):
    """float32 (logp, prox, behav, mask): row 0 empty, row 1 one token, row 2 full.
    Behaviour log-ratios from a set whose token weights are never within 5% of a
    bound used below (caps 2, 1.5 and their reciprocals)."""
    rng = np.random.default_rng(seed)
    mask = rng.random((n, t)) < 0.75
    mask[0], mask[1] = False, False
    mask[1, rng.integers(t)] = True
    mask[2] = True
    logp = np.log(rng.uniform(0.05, 0.95, (n, t)))
    prox = logp - rng.normal(0, 0.2, (n, t))
    log_w = np.log(rng.choice([0.3, 0.45, 0.8, 1.0, 1.2, 1.7, 2.4, 4.0], (n, t)))
    f32 = np.float32
    return f32(logp), f32(prox), f32(prox - log_w), mask


def assert_away_from_bounds(level, prox, behav, mask, bounds):
    """The reference decides each weight against the bounds in float64: keep the test's
    weights far (relative 1e-4 >> RTOL) from them, so float32 decides the same way."""
    w = ref_raw_weight(level, prox, behav, mask)[mask]
    for b in bounds:
        assert np.all(np.abs(w / b - 1) > 1e-4), (level, b)


@pytest.mark.parametrize("cap,floor", [(2.0, None), (1.5, 0.5)])
@pytest.mark.parametrize("correction", CORRECTIONS)
@pytest.mark.parametrize("level", LEVELS)
def test_apply_matches_reference(level, correction, cap, floor):
    logp, prox, behav, mask = make_streams(sum(map(ord, level + correction)) + int(cap * 10))
    c = off_policy.Correction(correction, level, cap, floor)
    assert_away_from_bounds(level, prox, behav, mask, [cap] + ([c.lower] if c.lower else []))
    weight, kept, metrics = off_policy.apply(c, prox, behav, logp, mask)
    want_w, want_kept, want_metrics = ref_correct(correction, level, cap, floor, prox, behav,
                                                  logp, mask)
    np.testing.assert_array_equal(kept, want_kept)
    np.testing.assert_allclose(np.where(want_kept, weight, 0), np.where(want_kept, want_w, 0),
                               rtol=RTOL)
    for key, value in want_metrics.items():
        np.testing.assert_allclose(metrics[key], value, rtol=RTOL, atol=1e-7, err_msg=key)
    if correction and level == "token":
        assert 0 < want_metrics["corrected_frac"] < 1
    if correction == "mis" and level != "token":  # whole rows leave the mask
        removed = mask & ~want_kept
        assert np.all(~want_kept[removed.any(1)])
        assert removed.any() or level == "geometric"  # row means rarely leave [1/1.5, 1.5]


def test_quantiles_ignore_masked_values():
    # masked entries hold huge weights: any leak shows in the max and the p99
    w = np.array([[1.0, 2.0, 50.0], [3.0, 50.0, 4.0]])
    mask = np.array([[True, True, False], [True, False, True]])
    behav = np.float32(-np.log(w))
    _, _, metrics = off_policy.apply(off_policy.Correction(""), np.zeros_like(behav), behav,
                                     np.zeros_like(behav), mask)
    kept = np.array([1.0, 2.0, 3.0, 4.0])
    for name, q in (("is_weight_p50", 0.5), ("is_weight_p90", 0.9), ("is_weight_p99", 0.99)):
        # exp(-log w) in float32: a few eps relative
        np.testing.assert_allclose(metrics[name], np.quantile(kept, q), rtol=8 * F32_EPS)
    np.testing.assert_allclose(metrics["is_weight_max"], 4.0, rtol=8 * F32_EPS)
    _, _, empty = off_policy.apply(off_policy.Correction("tis"), np.zeros_like(behav), behav,
                                   np.zeros_like(behav), np.zeros_like(mask))
    assert all(float(v) == 0.0 for v in empty.values()), empty


def ref_alpha(versions, version):
    """α of the docs: (v_prox - v_b)/(v_θ - v_b), v_prox = V, v_θ = V + 1, in [0, 1];
    0 for padding (v_b < 0) or v_θ <= v_b. Written per token."""
    out = np.zeros(versions.shape)
    for idx, v_b in np.ndenumerate(versions):
        gap = version + 1 - v_b
        if v_b >= 0 and gap > 0:
            out[idx] = min(max((version - v_b) / gap, 0.0), 1.0)
    return out


def test_interpolated_proximal_matches_reference():
    version = 7
    # padding, the current version (α = 0), one, three and seven versions behind
    # (1/2, 3/4, 7/8), and versions ahead of the learner (gap 0 and < 0: α = 0)
    versions = np.array([[-1, 7, 6, 4, 0, 8], [9, 5, 7, -1, 3, 6]], np.int32)
    alpha = ref_alpha(versions, version)
    np.testing.assert_array_equal(alpha[0], [0, 0, 0.5, 0.75, 0.875, 0])
    rng = np.random.default_rng(0)
    behav = np.float32(np.log(rng.uniform(0.05, 0.95, versions.shape)))
    logp = np.float32(np.log(rng.uniform(0.05, 0.95, versions.shape)))
    got_alpha = off_policy.interpolation_weight(versions, jnp.int32(version))
    np.testing.assert_allclose(got_alpha, alpha, rtol=F32_EPS)  # one division, rounded
    got = off_policy.interpolate_proximal(behav, logp, versions, jnp.int32(version))
    want = (1 - alpha) * np.float64(behav) + alpha * np.float64(logp)
    # behav + α(logp - behav) in float32: three roundings of values <= |log 0.05| = 3
    np.testing.assert_allclose(got, want, rtol=0, atol=3 * 3 * F32_EPS)
    np.testing.assert_array_equal(np.asarray(got)[alpha == 0], behav[alpha == 0])
    grad = jax.grad(lambda lp: jnp.sum(off_policy.interpolate_proximal(
        behav, lp, versions, jnp.int32(version))))(jnp.asarray(logp))
    assert np.all(np.asarray(grad) == 0.0)  # the proximal policy is a constant


def ppo(logp, old, adv, mask, **kw):
    return losses.compute("ppo", logp, old, adv, mask, eps_low=0.2, eps_high=0.28, **kw)


def grad_of(logp, old, adv, mask, **kw):
    return np.asarray(jax.grad(lambda lp: ppo(lp, old, adv, mask, **kw)[0])(jnp.asarray(logp)))


@pytest.mark.parametrize("correction", ["tis", "mis"])
@pytest.mark.parametrize("level", LEVELS)
def test_weight_is_detached(level, correction):
    # the corrected gradient is the weight times the plain one: no gradient flows
    # through w (with mis, the kept tokens' mean has the kept count as denominator)
    logp, prox, behav, mask = make_streams(3)
    adv = np.float32(np.random.default_rng(4).normal(size=mask.shape[0]))
    c = off_policy.Correction(correction, level)
    got = grad_of(logp, prox, adv, mask, behavior_logp=behav, off_policy=c)
    weight, kept, _ = ref_correct(correction, level, 2.0, None, prox, behav, logp, mask)
    want = grad_of(logp, prox, adv, mask) * weight * mask.sum() / max(kept.sum(), 1)
    # one weight multiply on top of the plain gradient: float32 rounding of each
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-9)
    assert np.all(got[mask & ~kept] == 0.0)


@pytest.mark.parametrize("level", ["sequence", "geometric"])
def test_mis_removes_rows_from_the_token_mean(level):
    logp, prox, _, mask = make_streams(5)
    adv = np.float32(np.random.default_rng(6).normal(size=mask.shape[0]))
    behav = prox.copy()  # weight 1 everywhere ...
    behav[2] -= 3.0      # ... but row 2 (a full row): e^3 > 2 at both levels
    c = off_policy.Correction("mis", level)
    value, metrics = ppo(logp, prox, adv, mask, behavior_logp=behav, off_policy=c)
    without = mask.copy()
    without[2] = False
    want, _ = ppo(logp, prox, adv, without)  # row 2 left out, numerator and denominator
    np.testing.assert_allclose(value, want, rtol=RTOL)
    np.testing.assert_allclose(metrics["corrected_frac"], mask[2].sum() / mask.sum(),
                               rtol=RTOL)
    truncated, _ = ppo(logp, prox, adv, mask, behavior_logp=behav,
                       off_policy=off_policy.Correction("tis", level))
    assert abs(float(truncated) - float(want)) > 1e-3  # tis keeps row 2 (at weight 2)


def test_interpolated_proximal_in_the_loss():
    logp, _, behav, mask = make_streams(8)
    versions = np.where(mask, np.random.default_rng(9).integers(0, 4, mask.shape),
                        -1).astype(np.int32)
    adv = np.float32(np.random.default_rng(10).normal(size=mask.shape[0]))
    c = off_policy.Correction("tis")
    kw = dict(behavior_logp=behav, off_policy=c, versions=versions, version=jnp.int32(3))
    value, metrics = ppo(logp, None, adv, mask, proximal="interpolate", **kw)
    prox = off_policy.interpolate_proximal(behav, logp, versions, jnp.int32(3))
    want, want_metrics = ppo(logp, prox, adv, mask, behavior_logp=behav, off_policy=c)
    assert float(value) == float(want)
    assert ({k: float(v) for k, v in metrics.items()}
            == {k: float(v) for k, v in want_metrics.items()})
    got_grad = grad_of(logp, None, adv, mask, proximal="interpolate", **kw)
    np.testing.assert_array_equal(got_grad, grad_of(logp, prox, adv, mask,
                                                    behavior_logp=behav, off_policy=c))
    with pytest.raises(ValueError, match="needs behavior_logp, versions and version"):
        ppo(logp, None, adv, mask, proximal="interpolate", behavior_logp=behav)


@pytest.mark.parametrize("kwargs,match", [
    ({"correction": "clip"}, "rl.off_policy.correction must be"),
    ({"level": "row"}, "rl.off_policy.level must be one of geometric, sequence, token"),
    ({"cap": 0.0}, "rl.off_policy.cap must be > 0"),
    ({"floor": -0.1}, "rl.off_policy.floor must be >= 0"),
    ({"correction": "tis", "cap": 2.0, "floor": 2.0}, "rl.off_policy.floor \\(2\\) must be <"),
    ({"correction": "mis", "cap": 0.8}, "the default floor 1/cap \\(1.25\\) must be <"),
])
def test_bad_settings_name_the_key(kwargs, match):
    with pytest.raises(ValueError, match=match):
        off_policy.Correction(**kwargs)


def test_defaults_and_resolution():
    assert off_policy.Correction().kind == "" and off_policy.Correction("tis").lower == 0.0
    assert off_policy.Correction("mis", cap=4.0).lower == 0.25
    assert off_policy.Correction("tis", cap=0.5).lower == 0.0  # tis may cap below 1
    assert off_policy.resolve_correction(None, asynchronous=True) == "tis"
    assert off_policy.resolve_correction(None, asynchronous=False) == ""
    assert off_policy.resolve_correction("mis", asynchronous=False) == "mis"
    assert off_policy.resolve_correction("", asynchronous=True) == ""
