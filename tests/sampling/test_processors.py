"""Sampling processors: statistical and exactness tests against a NumPy reference.

The reference distribution is computed independently in float64 from the
definitions in `sampling.processors`. Goodness of fit is a chi-square test on
20000 draws with fixed seeds (so deterministic); the chi-square survival
function is written out in closed form (integer degrees of freedom), so scipy
is not needed.
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sampling.params import SamplingParams
from sampling.processors import sample, sampling_logprobs

V = 12
LOGITS = np.array([2.1, 1.3, 0.4, -0.5, 1.9, 0.0, -1.2, 0.9, -2.0, 0.6, 1.6, -0.3])
N = 20000


def _softmax(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - np.max(x))
    return e / e.sum()


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def ref_probs(logits, params, margin=1e-3):
    """The claimed sampling distribution, float64, from the definitions.

    `margin` asserts no cut is within that distance of a threshold, so fp32
    rounding in the implementation cannot flip a keep/drop decision.
    """
    x = np.array(logits, np.float64)
    if params.greedy:
        p = np.zeros_like(x)
        p[np.argmax(x)] = 1.0
        return p
    x = x / params.temperature
    if 0 < params.top_k < x.size:
        kth = np.sort(x)[::-1][params.top_k - 1]
        x[x < kth] = -np.inf
    if params.top_p < 1.0:
        p = _softmax(x)
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        before = cum - p[order]
        assert np.all(np.abs(cum - params.top_p) > margin), "top_p too close to a cut"
        drop = order[before >= params.top_p]
        x[drop] = -np.inf
    if params.min_p > 0.0:
        p = _softmax(x)
        ratio = p / p.max()
        assert np.all(np.abs(ratio[p > 0] - params.min_p) > margin), "min_p too close"
        x[ratio < params.min_p] = -np.inf
    return _softmax(x)


def chi2_sf(stat, df):
    """P(chi2_df >= stat) for integer df >= 1, in float64: the regularized upper
    incomplete gamma Q(df / 2, stat / 2) in its closed form."""
    y = stat / 2.0
    if df % 2 == 0:
        term, total = 1.0, 1.0                      # y^i / i!
        for i in range(1, df // 2):
            term *= y / i
            total += term
        return math.exp(-y) * total
    term = math.sqrt(y) / math.gamma(1.5)           # y^(i - 1/2) / Gamma(i + 1/2)
    total = term if df > 1 else 0.0
    for i in range(2, (df + 1) // 2):
        term *= y / (i - 0.5)
        total += term
    return math.erfc(math.sqrt(y)) + math.exp(-y) * total


def chi2_pvalue(counts, probs):
    """Goodness of fit of `counts` to `probs` on its support; bins with an
    expected count below 5 are pooled into one."""
    n = counts.sum()
    support = probs > 0
    exp, obs = n * probs[support], counts[support].astype(np.float64)
    small = exp < 5
    if small.any():
        exp = np.append(exp[~small], exp[small].sum())
        obs = np.append(obs[~small], obs[small].sum())
    if exp.size < 2:
        return 1.0
    stat = float(np.sum((obs - exp) ** 2 / exp))
    return chi2_sf(stat, exp.size - 1)


@functools.partial(jax.jit, static_argnames=("params",))
def _draw(key, params):
    """N draws from LOGITS, and `sampling_logprobs` of LOGITS: one compile."""
    logits = jnp.asarray(LOGITS, jnp.float32)[None]
    drawn = sample(jnp.broadcast_to(logits, (N, V)), key, params)
    return drawn, sampling_logprobs(logits, params)[0]


def draw(params, seed):
    """(tokens, logp_sampled, logp_raw) of N draws, and the full log-probs row."""
    (tok, lp, lr), full = _draw(jax.random.key(seed), params)
    return np.asarray(tok), np.asarray(lp), np.asarray(lr), np.asarray(full)


CONFIGS = [
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.5),
    SamplingParams(temperature=1.7),
    SamplingParams(top_k=5),
    SamplingParams(top_p=0.8),
    SamplingParams(min_p=0.15),
    SamplingParams(temperature=0.8, top_k=7, top_p=0.85),
    SamplingParams(temperature=1.3, top_p=0.9, min_p=0.05),
    SamplingParams(temperature=0.7, top_k=6, min_p=0.1),
    SamplingParams(temperature=1.2, top_k=8, top_p=0.9, min_p=0.08),
]
IDS = [f"T{p.temperature}-k{p.top_k}-p{p.top_p}-m{p.min_p}" for p in CONFIGS]


@pytest.mark.parametrize("params", CONFIGS, ids=IDS)
def test_samples_follow_claimed_distribution_with_exact_logprobs(params):
    want = ref_probs(LOGITS, params)
    tok, lp, lr, full = draw(params, seed=CONFIGS.index(params) + 1)
    counts = np.bincount(tok, minlength=V)
    assert counts.size == V
    assert counts[want == 0].sum() == 0, "sampled a token outside the claimed support"
    assert chi2_pvalue(counts, want) > 1e-3
    # The returned log-probs are those of the claimed / raw distributions.
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(lp, np.log(want)[tok], atol=1e-5, rtol=0)
    np.testing.assert_allclose(lr, _log_softmax(LOGITS)[tok], atol=1e-5, rtol=0)
    assert np.all(np.isneginf(full[want == 0]))
    np.testing.assert_allclose(full[want > 0], np.log(want[want > 0]), atol=1e-5, rtol=0)


def test_chi_square_has_power():
    """Draws at temperature 1 must be rejected against the temperature-0.5
    claim, and a mild mismatch (1.0 vs 1.15) too."""
    tok, _, _, _ = draw(SamplingParams(temperature=1.0), seed=7)
    counts = np.bincount(tok, minlength=V)
    assert chi2_pvalue(counts, ref_probs(LOGITS, SamplingParams(temperature=0.5))) < 1e-6
    assert chi2_pvalue(counts, ref_probs(LOGITS, SamplingParams(temperature=1.15))) < 1e-6
    assert chi2_pvalue(counts, ref_probs(LOGITS, SamplingParams(temperature=1.0))) > 1e-3


def test_chi2_sf_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in range(1, 13):
        for stat in (0.01, 0.5, 3.0, 11.0, 40.0, 150.0):
            assert chi2_sf(stat, df) == pytest.approx(stats.chi2.sf(stat, df), rel=1e-9, abs=1e-300)


def _random_logits(seed, s, v, gap=True):
    rng = np.random.default_rng(seed)
    if gap:  # distinct logits with clear gaps: a permutation of a spread grid
        return np.stack([rng.permutation(v) * 0.05 - 2.0 for _ in range(s)]).astype(np.float32)
    return rng.normal(size=(s, v)).astype(np.float32)


def test_greedy():
    logits = _random_logits(0, 8, 50, gap=False)
    params = SamplingParams(temperature=0.0)
    assert params.greedy and not SamplingParams().greedy
    tok, lp, lr = sample(jnp.asarray(logits), jax.random.key(0), params)
    np.testing.assert_array_equal(np.asarray(tok), logits.argmax(-1))
    assert tok.dtype == jnp.int32 and lp.dtype == jnp.float32 and lr.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(lp), 0.0)
    np.testing.assert_allclose(np.asarray(lr), _log_softmax(logits)[np.arange(8), logits.argmax(-1)],
                               atol=1e-5)
    full = np.asarray(sampling_logprobs(jnp.asarray(logits), params))
    assert np.all(full[np.arange(8), logits.argmax(-1)] == 0.0)
    assert np.isneginf(full).sum() == 8 * 49


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=2.0, top_k=1),
    SamplingParams(temperature=3.0, top_p=1e-6),
    SamplingParams(min_p=0.999),
    SamplingParams(temperature=0.3, top_k=10, top_p=0.99, min_p=0.999),
], ids=["k1-T2", "p1e-6-T3", "m0.999", "combo-m0.999"])
def test_filters_that_keep_only_the_top_token(params):
    logits = _random_logits(1, 16, 100)
    tok, lp, lr = sample(jnp.asarray(logits), jax.random.key(3), params)
    np.testing.assert_array_equal(np.asarray(tok), logits.argmax(-1))
    np.testing.assert_allclose(np.asarray(lp), 0.0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(lr), _log_softmax(logits)[np.arange(16), logits.argmax(-1)],
                               atol=1e-5)


def test_top_k_ties_keep_all_tied_and_large_k_is_off():
    logits = jnp.asarray([[3.0, 1.0, 2.0, 2.0, 0.0]])
    lp = np.asarray(sampling_logprobs(logits, SamplingParams(top_k=2)))[0]
    np.testing.assert_array_equal(np.isfinite(lp), [True, False, True, True, False])
    np.testing.assert_allclose(lp[np.isfinite(lp)], _log_softmax([3.0, 2.0, 2.0]), atol=1e-6)
    # p = (.576, .212, .212) over [3, 2, 2]: mass before the first 2 is .576 <
    # 0.6, so the cut is at value 2 and both tied tokens stay. (Normalising over
    # the k=2 sorted values alone would give .731 >= 0.6 and keep only the 3.)
    lp = np.asarray(sampling_logprobs(logits, SamplingParams(top_k=2, top_p=0.6)))[0]
    np.testing.assert_array_equal(np.isfinite(lp), [True, False, True, True, False])
    for k in (5, 50):
        lp = np.asarray(sampling_logprobs(logits, SamplingParams(top_k=k)))[0]
        np.testing.assert_allclose(lp, _log_softmax(np.asarray(logits[0])), atol=1e-6)


@pytest.mark.parametrize("params", [
    SamplingParams(),
    SamplingParams(temperature=0.5, top_k=3),
    SamplingParams(top_k=10, top_p=0.9),
    SamplingParams(top_p=0.95, min_p=0.01),
    SamplingParams(temperature=0.0),
], ids=["plain", "T0.5-k3", "k10-p0.9", "p0.95-m0.01", "greedy"])
def test_neg_inf_and_very_negative_logits(params):
    ninf = -np.inf
    logits = np.array([
        [ninf, 1.0, -1e30, 0.5, ninf, -3e38, 0.2, ninf],
        [ninf, ninf, ninf, 2.0, ninf, ninf, ninf, ninf],   # one finite token
        [-1e30, -1e30, -1e30, 5.0, 4.0, -1e30, -1e30, -1e30],
    ], np.float32)
    rows = jnp.asarray(np.repeat(logits, 200, axis=0))
    tok, lp, lr = (np.asarray(a) for a in sample(rows, jax.random.key(5), params))
    allowed = [{1, 3, 6}, {3}, {3, 4}]
    for r in range(3):
        assert set(tok[r * 200:(r + 1) * 200]) <= allowed[r]
    assert np.all(np.isfinite(lp)) and np.all(np.isfinite(lr)) and np.all(lp <= 0)
    np.testing.assert_array_equal(tok[200:400], 3)
    np.testing.assert_allclose(lp[200:400], 0.0, atol=1e-6)
    np.testing.assert_allclose(lr[200:400], 0.0, atol=1e-6)
    full = np.asarray(sampling_logprobs(jnp.asarray(logits), params))
    assert not np.any(np.isnan(full))
    assert np.all(np.isneginf(full[np.isneginf(logits)]))
    np.testing.assert_allclose(np.exp(full).sum(-1), 1.0, atol=1e-5)


def test_bf16_logits_are_processed_in_fp32():
    logits = jnp.asarray(_random_logits(2, 4, 64, gap=False), jnp.bfloat16)
    tok, lp, lr = sample(logits, jax.random.key(9), SamplingParams(temperature=0.9, top_p=0.9))
    ref = _log_softmax(np.asarray(logits.astype(jnp.float32)))
    np.testing.assert_allclose(np.asarray(lr), ref[np.arange(4), np.asarray(tok)], atol=1e-5)
    assert lp.dtype == jnp.float32 and lr.dtype == jnp.float32


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0.7, top_k=50, top_p=0.9, min_p=0.05),
    SamplingParams(top_p=0.95),                     # full-vocab sort path
])
def test_large_vocab_smoke(params):
    s, v = 2, 151936
    logits = jnp.asarray(np.random.default_rng(4).normal(size=(s, v)) * 3, jnp.float32)
    key = jax.random.key(11)
    compiled = sample.lower(logits, key, params).compile()
    mem = compiled.memory_analysis()
    if mem is not None:  # O(S * V) temporaries, nowhere near [S, V, V]
        assert mem.temp_size_in_bytes < 64 * s * v * 4
    tok, lp, lr = (np.asarray(a) for a in compiled(logits, key))
    assert tok.shape == (s,) and np.all((tok >= 0) & (tok < v))
    assert np.all(np.isfinite(lp)) and np.all(lr <= lp + 1e-5)
    for r in range(s):
        want = ref_probs(np.asarray(logits[r]), params, margin=0.0)
        assert want[tok[r]] > 0
        assert lp[r] == pytest.approx(math.log(want[tok[r]]), abs=1e-4)


# ---------------------------------------------------------------- SamplingParams


@pytest.mark.parametrize("kwargs, field", [
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": float("inf")}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": "1"}, "temperature"),
    ({"top_k": -1}, "top_k"),
    ({"top_k": 2.0}, "top_k"),
    ({"top_k": True}, "top_k"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.01}, "top_p"),
    ({"top_p": float("nan")}, "top_p"),
    ({"min_p": -0.01}, "min_p"),
    ({"min_p": 1.0}, "min_p"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"max_new_tokens": 3.0}, "max_new_tokens"),
    ({"stop_token_ids": (1, -2)}, "stop_token_ids"),
    ({"stop_token_ids": (1, 2.0)}, "stop_token_ids"),
    ({"stop_token_ids": 5}, "stop_token_ids"),
    ({"stop_token_ids": "12"}, "stop_token_ids"),
])
def test_params_validation(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_params_normalised_and_hashable():
    p = SamplingParams(temperature=1, top_k=np.int64(4), stop_token_ids=[7, np.int32(9)])
    assert p.stop_token_ids == (7, 9) and isinstance(p.stop_token_ids, tuple)
    assert isinstance(p.temperature, float) and type(p.top_k) is int
    q = SamplingParams(temperature=1.0, top_k=4, stop_token_ids=(7, 9))
    assert p == q and hash(p) == hash(q)
    assert p != SamplingParams(temperature=1.0, top_k=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.top_k = 3

    traces = []

    def g(x, params):
        traces.append(params)
        return x * params.temperature

    g = jax.jit(g, static_argnames=("params",))
    for params in (p, q, SamplingParams(temperature=2.0)):
        g(jnp.ones(2), params=params)
    assert len(traces) == 2  # p and q share one compilation
