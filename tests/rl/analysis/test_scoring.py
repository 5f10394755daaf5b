"""Two-model teacher-forced scoring against `models.apply` and NumPy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from rl.analysis import pairs, scoring, summary
from tests.tolerances import fp32_atol


@pytest.fixture(scope="module")
def pair():
    config = models.get_preset("tiny")
    other = config.replace(family="llama")  # another architecture, same vocab
    return (config, models.init(config, jax.random.key(0)),
            other, models.init(other, jax.random.key(1)))


@pytest.fixture(scope="module")
def tokens():
    t = np.asarray(jax.random.randint(jax.random.key(2), (3, 37), 0, 512), np.int32)
    segs = np.ones_like(t)
    segs[1, 30:] = 0  # row 1 is right-padded
    return t, segs


def numpy_reference(logits_a, logits_b, targets, k):
    """Independent float64 NumPy statistics of next-token logits [N, V]."""
    def log_softmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    la, lb = log_softmax(logits_a), log_softmax(logits_b)
    pa, pb = np.exp(la), np.exp(lb)
    m = 0.5 * (pa + pb)
    rows = np.arange(len(targets))
    top_a = np.argsort(-logits_a, axis=-1)[:, :k]
    top_b = np.argsort(-logits_b, axis=-1)[:, :k]
    return {
        "logp_a": la[rows, targets], "logp_b": lb[rows, targets],
        "entropy_a": -(pa * la).sum(-1), "entropy_b": -(pb * lb).sum(-1),
        "kl_ab": (pa * (la - lb)).sum(-1), "kl_ba": (pb * (lb - la)).sum(-1),
        "js": 0.5 * ((pa * np.log(pa / m)).sum(-1) + (pb * np.log(pb / m)).sum(-1)),
        "rank_a": (logits_a > logits_a[rows, targets][:, None]).sum(-1),
        "rank_b": (logits_b > logits_b[rows, targets][:, None]).sum(-1),
        "topk_overlap": np.array([len(set(a) & set(b)) / k for a, b in zip(top_a, top_b)]),
        "a_top1": pa[rows, top_a[:, 0]], "b_on_a_top1": pb[rows, top_a[:, 0]],
        "a_topk": np.take_along_axis(pa, top_a, -1).sum(-1),
        "b_on_a_topk": np.take_along_axis(pb, top_a, -1).sum(-1),
    }


def direct_logits(config, params, tokens, segs):
    return np.asarray(models.apply(config, params, jnp.asarray(tokens),
                                   segment_ids=jnp.asarray(segs)), np.float64)


@pytest.mark.parametrize("options", [
    scoring.ScoreOptions(top_k=5),                                        # one vocab block
    scoring.ScoreOptions(top_k=5, position_chunk=7, vocab_chunk=100),    # 6 slices, padded
    scoring.ScoreOptions(top_k=5, position_chunk=64, vocab_chunk=3),     # slices narrower than k
], ids=["dense", "chunked", "narrow"])
def test_matches_apply_and_numpy(pair, tokens, options):
    ca, pa, cb, pb = pair
    t, segs = tokens
    out = jax.device_get(scoring.score_pair(ca, pa, cb, pb, t, segs, options))
    xa, xb = direct_logits(ca, pa, t, segs), direct_logits(cb, pb, t, segs)
    valid = segs[:, 1:].astype(bool)               # position t-1 predicts token t
    ref = numpy_reference(xa[:, :-1][valid], xb[:, :-1][valid], t[:, 1:][valid], 5)
    # Log-probs and the vocabulary sums (entropy, KL, JS, masses) add V = 512 fp32
    # terms of magnitude <= max|log p|; the forward itself sums over D = 256.
    logits = {"a": xa[:, :-1][valid], "b": xb[:, :-1][valid]}
    targets = t[:, 1:][valid]
    rounding = fp32_atol(xa, 256)  # two programs' logits differ by this much at most
    for name, want in ref.items():
        got = out[name][:, 1:][valid]
        if name.startswith("rank"):
            # Exact, except for ids whose logit is within rounding of the target's.
            x = logits[name[-1]]
            tied = np.sum(np.abs(x - x[np.arange(len(x)), targets][:, None]) <= rounding, -1) - 1
            assert np.all(np.abs(got - want) <= tied), name
            continue
        if name == "topk_overlap":
            # Exact, except where a model's k-th and (k+1)-th logits are within rounding.
            edge = [np.abs(np.diff(-np.sort(-x, -1)[:, 4:6], axis=-1))[:, 0] <= rounding
                    for x in logits.values()]
            assert np.all((np.abs(got - want) < 1e-6) | edge[0] | edge[1]), name
            continue
        atol = max(fp32_atol(want, 512), fp32_atol(xa, 256), 1e-6)
        np.testing.assert_allclose(got, want, atol=atol, rtol=0, err_msg=name)
    np.testing.assert_array_equal(out["delta_logp"], out["logp_b"] - out["logp_a"])
    assert np.all(out["js"] >= 0) and np.all(out["js"] <= np.log(2))
    for name in scoring.FIELDS:
        assert out[name].shape == t.shape and np.all(out[name][:, 0] == 0), name


def test_logp_matches_apply_within_1e5(pair, tokens):
    ca, pa, cb, pb = pair
    t, segs = tokens
    out = scoring.score_pair(ca, pa, cb, pb, t, segs)
    valid = segs[:, 1:].astype(bool)
    for config, params, key in ((ca, pa, "logp_a"), (cb, pb, "logp_b")):
        logp = jax.nn.log_softmax(models.apply(config, params, t, segment_ids=segs), -1)
        want = np.take_along_axis(np.asarray(logp[:, :-1]), t[:, 1:, None], -1)[..., 0]
        np.testing.assert_allclose(np.asarray(out[key])[:, 1:][valid], want[valid],
                                   atol=1e-5, rtol=0)


@pytest.mark.parametrize("vocab_chunk", [32768, 96])
def test_model_against_itself(pair, tokens, vocab_chunk):
    ca, pa, _, _ = pair
    t, segs = tokens
    out = scoring.score_pair(ca, pa, ca, pa, t, segs, scoring.ScoreOptions(vocab_chunk=vocab_chunk))
    assert np.all(np.asarray(out["delta_logp"]) == 0.0)
    np.testing.assert_array_equal(out["entropy_a"], out["entropy_b"])
    np.testing.assert_array_equal(out["topk_overlap"][:, 1:], 1.0)
    # JS and KL of identical distributions: rounding only (V terms of size <= log V).
    assert float(jnp.max(jnp.abs(out["js"]))) < fp32_atol(np.log(512), 512)
    assert float(jnp.max(jnp.abs(out["kl_ab"]))) < fp32_atol(np.log(512), 512)


def test_padding_does_not_change_real_positions(pair, tokens):
    ca, pa, cb, pb = pair
    t, segs = tokens
    full = scoring.score_pair(ca, pa, cb, pb, t, segs)
    alone = scoring.score_pair(ca, pa, cb, pb, t[1:2, :30], segs[1:2, :30])
    # Another batch shape: another summation order. The statistics are sums of V = 512
    # terms of size <= log V (entropy, KL, JS) or a log-probability of that size.
    for name in ("logp_a", "js", "kl_ba"):
        np.testing.assert_allclose(np.asarray(full[name])[1, :30], np.asarray(alone[name])[0],
                                   atol=fp32_atol(np.log(512.0), 512), rtol=0)


def test_bad_input_errors(pair):
    ca, pa, cb, _ = pair
    with pytest.raises(ValueError, match="vocabularies differ"):
        scoring.check_pair(ca, cb.replace(vocab_size=1024))
    with pytest.raises(ValueError, match="vocab_chunk"):
        scoring.ScoreOptions(vocab_chunk=0)
    with pytest.raises(ValueError, match="as many prompts"):
        pairs.pack([[1, 2]], [])


def test_score_rows_packs_and_batches(pair):
    ca, pa, cb, pb = pair
    base, other = pairs.Policy("a", ca, pa, ""), pairs.Policy("b", cb, pb, "")
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
    completions = [[11, 12], [13, 14, 15, 16], [17], [18, 19, 20]]
    scored = pairs.score_rows(base, other, prompts, completions, batch_rows=3)
    assert scored.tokens.shape == (4, pairs.WIDTH_MULTIPLE)
    np.testing.assert_array_equal(scored.tokens[1, :6], [4, 5, 13, 14, 15, 16])
    assert scored.mask.sum() == 10 and scored.mask[1, 2:6].all() and not scored.mask[1, :2].any()
    direct = scoring.score_pair(ca, pa, cb, pb, scored.tokens[1:2, :6], np.ones((1, 6), np.int32))
    np.testing.assert_allclose(scored.stats["js"][1, 2:6], np.asarray(direct["js"])[0, 2:6],
                               atol=fp32_atol(np.log(512.0), 512), rtol=0)


def test_summary_functions():
    mask = summary.completion_mask([2, 1], [3, 4], 6)
    np.testing.assert_array_equal(mask, [[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 0]])
    pos = summary.normalised_position(mask)
    np.testing.assert_allclose(pos[mask], [0, 1 / 3, 2 / 3, 0, .25, .5, .75])
    js = np.array([0.0, 0.05, 0.2, 0.001, 0.0, 0.0, 0.5])
    assert summary.sparsity(js) == {"0.01": 3 / 7, "0.1": 2 / 7}
    hist = summary.positional(js, np.zeros(7), pos[mask], bins=2)
    assert hist["count"] == [4, 3] and hist["high_fraction"]["0.1"] == [0.0, 2 / 3]
    tokens = {"a_top1": np.array([0.5, 0.9]), "b_on_a_top1": np.array([0.7, 0.9]),
              "a_topk": np.array([0.8, 1.0]), "b_on_a_topk": np.array([0.9, 0.9])}
    np.testing.assert_allclose(list(summary.reallocation(tokens).values()), [0.1, 0.0, 0.0],
                               atol=1e-12)
