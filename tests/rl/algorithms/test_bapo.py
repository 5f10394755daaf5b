"""BAPO (`losses.compute("bapo", ...)`, rl.algorithms.bapo) against a float64 NumPy
reference of the authors' procedure: bounds raised one step at a time in Python loops
(their `min(cur + step, max)`), stopping once the positive share meets the target.

`ref_token_loss` is shared with test_losses.py (the sweep over every loss)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl.algorithms import bapo, losses
from tests.tolerances import F32_EPS

PAPER = dict(target=0.4, low_start=0.6, low_max=0.9, low_step=0.02, high_start=1.2,
             high_max=3.0, high_step=0.05, dual_clip=3.0, order="low_first", measure="code")
# binary-exact grid: c_low 0.5 .. 0.875 (4 values), c_high 1.25 .. 2.5 (6 values)
GRID = dict(low_start=0.5, low_max=0.875, low_step=0.125, high_start=1.25, high_max=2.5,
            high_step=0.25)
N, T = 12, 8
# a share is a ratio of two sums of N·T float32 terms: each sum within N·T·eps of
# exact (relative), so the share within about 2·N·T·eps
SHARE_RTOL = 2 * N * T * F32_EPS


def ref_share(r, adv, mask, u, c_low, c_high):
    """pos / (pos + neg) of the clipped values (1 when neg = 0), float64."""
    eff = np.where(adv >= 0, np.minimum(r, c_high), np.maximum(r, c_low)) * adv * mask * u
    pos, neg = eff[eff > 0].sum(), -eff[eff < 0].sum()
    return 1.0 if neg <= 0 else pos / (pos + neg)


def ref_search(r, adv, mask, u, *, target, low_start, low_max, low_step, high_start, high_max,
               high_step, order, **_):
    """(c_low, c_high, share, visited shares): raise one bound to its max, one step at a
    time, then the other, stopping when the share reaches the target."""
    bounds = {"low": low_start, "high": high_start}
    limits = {"low": (low_max, low_step), "high": (high_max, high_step)}
    visited = [ref_share(r, adv, mask, u, low_start, high_start)]
    for side in (("low", "high") if order == "low_first" else ("high", "low")):
        stop, step = limits[side]
        while visited[-1] < target and bounds[side] < stop and step > 0:
            bounds[side] = min(bounds[side] + step, stop)
            visited.append(ref_share(r, adv, mask, u, bounds["low"], bounds["high"]))
    return bounds["low"], bounds["high"], visited[-1], visited


def ref_token_loss(logp, old, adv, mask, **options):
    """(loss [N,T], d loss/d logp [N,T], indicators + bapo scalars), float64."""
    o = {**PAPER, **options}
    r = np.exp(np.float64(logp) - np.float64(old))
    u = np.exp(np.float64(old)) if o["measure"] == "paper" else 1.0
    c_low, c_high, share, _ = ref_search(r, adv, mask, u, **o)
    loss = -np.minimum(r * adv, np.clip(r, c_low, c_high) * adv)
    ind = {"clip_low": (adv < 0) & (r < c_low), "clip_high": (adv > 0) & (r > c_high),
           "clip_dual": np.zeros(mask.shape, bool)}
    d_ratio = np.where(ind["clip_low"] | ind["clip_high"], 0.0, -adv)
    if o["dual_clip"] is not None:
        ind["clip_dual"] = (adv < 0) & (r > o["dual_clip"])
        loss = np.where(adv < 0, np.minimum(loss, -o["dual_clip"] * adv), loss)
        d_ratio = np.where(ind["clip_dual"], 0.0, d_ratio)
    return loss, d_ratio * r, {**ind, "bapo_c_low": c_low, "bapo_c_high": c_high,
                               "bapo_pos_share": share}


def make_batch(seed, neg_scale=1.0):
    """float32 (logp, old, adv [N, T], mask), ratios kept 1% away from every grid bound
    and the dual clip, so float32 and float64 clip the same tokens."""
    rng = np.random.default_rng(seed)
    mask = rng.random((N, T)) < 0.8
    mask[0] = False
    adv = rng.normal(size=(N, T))
    adv = np.where(adv < 0, adv * neg_scale, adv)
    r = np.where(adv > 0, rng.uniform(0.7, 3.4, (N, T)), rng.uniform(0.3, 3.6, (N, T)))
    grid = [*bapo.candidates(0.5, 0.875, 0.125), *bapo.candidates(1.25, 2.5, 0.25), 3.0]
    for b in grid:
        r = np.where(np.abs(r / b - 1) < 0.01, r * 1.03, r)
    logp = np.log(rng.uniform(0.05, 0.95, (N, T)))
    f32 = np.float32
    return f32(logp), f32(logp - np.log(r)), f32(adv), mask


def search_jax(logp, old, adv, mask, measure="code", **o):
    o = {**PAPER, **GRID, **o}
    r = jnp.exp(jnp.asarray(logp) - jnp.asarray(old))
    u = jnp.exp(jnp.asarray(old)) if measure == "paper" else None
    return [float(x) for x in bapo.search(
        r, jnp.asarray(adv), jnp.asarray(mask), u, target=o["target"],
        lows=bapo.candidates(o["low_start"], o["low_max"], o["low_step"]),
        highs=bapo.candidates(o["high_start"], o["high_max"], o["high_step"]),
        order=o["order"])]


def target_for(visited, where):
    """A target that stops the search at visited state `where` ("start", "never" or an
    index), at least 0.005 away from every visited share."""
    if where == "start":
        return visited[0] - 0.05
    if where == "never":
        return max(visited) + 0.05
    before, at = max(visited[:where]), visited[where]
    assert at - before > 0.01, (where, visited)
    return (before + at) / 2


@pytest.mark.parametrize("measure", ["code", "paper"])
@pytest.mark.parametrize("order,where", [
    ("low_first", "start"), ("low_first", 5), ("low_first", 7), ("low_first", "never"),
    ("high_first", "start"), ("high_first", 2), ("high_first", 4), ("high_first", "never")])
def test_search_stops_where_the_procedure_does(order, where, measure):
    # index 5 / 7 (low first): c_low at its max (index 3), then 2 / 4 c_high steps;
    # index 2 / 4 (high first): c_high raised 2 / 4 steps, c_low at its start
    logp, old, adv, mask = make_batch(1, neg_scale=2.0)
    r = np.exp(np.float64(logp) - np.float64(old))
    u = np.exp(np.float64(old)) if measure == "paper" else 1.0
    o = {**GRID, "order": order}
    *_, visited = ref_search(r, adv, mask, u, target=2.0, **o)  # unreachable: every state
    assert len(visited) == 4 + 6 - 1
    target = target_for(visited, where)
    want = ref_search(r, adv, mask, u, target=target, **o)
    got = search_jax(logp, old, adv, mask, measure, target=target, order=order)
    np.testing.assert_allclose(got[:2], want[:2], rtol=F32_EPS)  # the grid, in float32
    np.testing.assert_allclose(got[2], want[2], rtol=SHARE_RTOL)
    if where == "never":
        assert got[:2] == [0.875, 2.5]
    if where == "start":
        assert got[:2] == [0.5, 1.25]
    if order == "low_first" and where != "start":
        assert got[0] == 0.875  # c_low went to its max before c_high moved


@pytest.mark.parametrize("seed", range(6))
def test_raising_c_low_never_raises_the_share(seed):
    # with the value measure, c_low only enters neg = Σ_{A<0} max(r, c_low)|A|, which
    # grows with c_low: the low-first loop can never stop on a c_low step, so when the
    # start misses the target, c_low always ends at its max
    logp, old, adv, mask = make_batch(10 + seed)
    r = np.exp(np.float64(logp) - np.float64(old))
    shares = [ref_share(r, adv, mask, 1.0, c, 1.25) for c in bapo.candidates(0.5, 0.875, 0.125)]
    assert all(b <= a for a, b in zip(shares, shares[1:]))
    got = search_jax(logp, old, adv, mask, target=shares[0] + 1e-3)
    assert got[0] == 0.875


@pytest.mark.parametrize("where", ["start", 6, "never"])
@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean"])
def test_loss_and_gradient_match_reference(where, agg):
    logp, old, adv, mask = make_batch(2, neg_scale=2.0)
    r = np.exp(np.float64(logp) - np.float64(old))
    *_, visited = ref_search(r, adv, mask, 1.0, target=2.0, order="low_first", **GRID)
    options = {**GRID, "target": target_for(visited, where)}
    loss, d_loss, ind = ref_token_loss(logp, old, adv, mask, **options)
    lengths = np.maximum(mask.sum(1, keepdims=True), 1)
    agg_w = mask / mask.sum() if agg == "token_mean" else mask / lengths / (mask.sum(1) > 0).sum()

    def f(lp):
        return losses.compute("bapo", lp, old, adv, mask, agg=agg, **options)

    (value, metrics), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(logp))
    # sums of N·T float32 terms
    np.testing.assert_allclose(value, np.sum(loss * agg_w), rtol=SHARE_RTOL)
    np.testing.assert_allclose(grad, d_loss * agg_w, rtol=1e-5, atol=1e-7)
    for key in ("bapo_c_low", "bapo_c_high"):
        np.testing.assert_allclose(metrics[key], ind[key], rtol=F32_EPS)
    np.testing.assert_allclose(metrics["bapo_pos_share"], ind["bapo_pos_share"],
                               rtol=SHARE_RTOL)
    for key in ("low", "high", "dual"):
        np.testing.assert_allclose(metrics[f"clip_frac_{key}"],
                                   ind[f"clip_{key}"][mask].mean(), rtol=1e-6)
    if where == 6:  # c_low at its max, c_high two steps up: both clips act
        assert metrics["clip_frac_low"] > 0 and metrics["clip_frac_high"] > 0


def test_jit_matches_eager_and_bounds_are_constants():
    logp, old, adv, mask = make_batch(3)

    def f(lp):
        return losses.compute("bapo", lp, old, adv, mask, **GRID)[0]

    eager, jitted = jax.value_and_grad(f)(logp), jax.jit(jax.value_and_grad(f))(logp)
    for a, b in zip(eager, jitted):
        # fused vs op-by-op sums: the batch's tokens
        np.testing.assert_allclose(a, b, atol=2 * N * T * F32_EPS * float(np.max(np.abs(b))))


def test_candidates():
    # the paper's grids: c_low 0.6..0.9 by 0.02 (16 values), c_high 1.2..3.0 by 0.05 (37)
    lows, highs = bapo.candidates(0.6, 0.9, 0.02), bapo.candidates(1.2, 3.0, 0.05)
    assert (len(lows), len(highs)) == (16, 37)
    assert lows[-1] == np.float32(0.9) and highs[-1] == np.float32(3.0)
    # the last step is clamped (as min(cur + step, max)); step 0 keeps the start
    np.testing.assert_array_equal(bapo.candidates(0.5, 0.8, 0.25), np.float32([0.5, 0.75, 0.8]))
    np.testing.assert_array_equal(bapo.candidates(0.5, 0.8, 0.0), np.float32([0.5]))
    low, high = bapo.path(3, 4, "low_first")
    assert list(zip(low, high)) == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (2, 3)]
    low, high = bapo.path(3, 4, "high_first")
    assert list(zip(low, high)) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3), (2, 3)]


@pytest.mark.parametrize("options,match", [
    ({"target": 1.5}, "rl.loss.target"),
    ({"low_start": 0.9, "low_max": 0.8}, "low_start <= low_max"),
    ({"high_start": 0.95}, "1 <= high_start"),
    ({"high_step": -0.1}, "rl.loss.low_step and high_step must be >= 0"),
    ({"dual_clip": 1.0}, "rl.loss.dual_clip must be > 1"),
    ({"order": "both"}, "rl.loss.order must be one of low_first, high_first"),
    ({"measure": "gradient"}, "rl.loss.measure must be one of code, paper"),
])
def test_bad_options_name_the_key(options, match):
    with pytest.raises(ValueError, match=match):
        bapo.check_options(**options)
    logp, old, adv, mask = make_batch(0)
    with pytest.raises(ValueError, match=match):
        losses.compute("bapo", logp, old, adv, mask, **options)
