"""Speculative decode calls in the flat sampler (`sampling.spec_decode`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from sampling import processors
from sampling.flat import generate
from sampling.params import SamplingParams
from sampling.spec_decode import SpecConfig


@pytest.fixture(scope="module")
def tiny():
    config = models.get_preset("tiny")
    return config, models.init(config, jax.random.key(0))


def prompts_of(seed, count, length=6):
    rng = np.random.default_rng(seed)
    return [list(map(int, rng.integers(3, 512, length))) for _ in range(count)]


def test_greedy_tokens_are_plain_decodings_across_segments_stops_and_budgets(tiny):
    config, params = tiny
    prompts = prompts_of(0, 2)
    sp = SamplingParams(temperature=0.0, max_new_tokens=48)
    first = generate(config, params, prompts, 3, sp, jax.random.key(1), segment_len=16)
    stop = int(first.tokens[0, 20])  # a token greedy decoding emits mid-way: rows stop on it
    sp = SamplingParams(temperature=0.0, max_new_tokens=48, stop_token_ids=(stop,))
    budgets = np.array([48, 5, 30, 48, 17, 1])
    kw = dict(segment_len=16, max_new_tokens_per_row=budgets)
    plain = generate(config, params, prompts, 3, sp, jax.random.key(1), **kw)
    spec = generate(config, params, prompts, 3, sp, jax.random.key(2), **kw,
                    speculative=SpecConfig(draft_len=4))
    assert (plain.finish_reason == "stop").any() and (plain.finish_reason == "length").any()
    np.testing.assert_array_equal(spec.tokens, plain.tokens)
    np.testing.assert_array_equal(spec.lengths, plain.lengths)
    np.testing.assert_array_equal(spec.finish_reason, plain.finish_reason)
    # the chunk forward sums in another order than one token's: fp32 rounding only
    np.testing.assert_allclose(spec.raw_logprobs, plain.raw_logprobs, atol=2e-5)
    np.testing.assert_array_equal(spec.logprobs, plain.logprobs)  # 0: greedy
    s = spec.stats
    assert s["spec/calls"] >= 2 and s["spec/accepted"] > 0
    assert s["spec/row_forwards"] < s["spec/tokens"]  # more than one token per forward


def test_only_calls_with_few_running_rows_speculate(tiny):
    config, params = tiny
    prompts = prompts_of(1, 4)
    sp = SamplingParams(temperature=0.0, max_new_tokens=48)
    budgets = np.array([48, 16, 16, 16])  # after the first segment one row runs
    kw = dict(segment_len=16, max_new_tokens_per_row=budgets)
    plain = generate(config, params, prompts, 1, sp, jax.random.key(1), **kw)
    spec = generate(config, params, prompts, 1, sp, jax.random.key(1), **kw,
                    speculative=SpecConfig(max_rows=1))
    np.testing.assert_array_equal(spec.tokens, plain.tokens)
    assert spec.stats["spec/calls"] == 2  # segments 2 and 3, not the first (4 rows)
    assert spec.stats["spec/tokens"] == 32


def test_a_call_that_keeps_too_few_drafts_turns_the_rest_plain(tiny):
    """Temperature 1 on a random model: almost no draft is kept (~1 token per forward),
    so after the first call the other two segments decode plainly."""
    config, params = tiny
    sp = SamplingParams(temperature=1.0, max_new_tokens=48)
    out = generate(config, params, prompts_of(2, 2), 1, sp, jax.random.key(1), segment_len=16,
                   speculative=SpecConfig(min_tokens_per_forward=1.5))
    s = out.stats
    assert s["spec/calls"] == 1 and s["spec/tokens"] < 1.5 * s["spec/row_forwards"]
    assert (out.lengths == 48).all()


def exact_joint(config, params, prompt, sp, length):
    """{token sequence: probability} of the first `length` tokens under `sp` (top-k 2:
    2^length sequences), from full forwards of the model over every prefix."""
    probs = {(): 1.0}
    for _ in range(length):
        seqs = list(probs)
        tokens = jnp.asarray([prompt + list(seq) for seq in seqs], jnp.int32)
        logits = models.apply(config, params, tokens)[:, -1]
        logp = np.asarray(processors.sampling_logprobs(logits, sp), np.float64)
        probs = {seq + (int(t),): probs[seq] * np.exp(logp[i, t])
                 for i, seq in enumerate(seqs) for t in np.flatnonzero(np.isfinite(logp[i]))}
    return probs


@pytest.mark.slow
def test_sampled_sequences_follow_the_policys_distribution(tiny):
    """N samples of one prompt by speculative decoding: every 4-token sequence's
    frequency within 5 binomial standard errors of its exact probability (top-k 2, so 16
    sequences; the first token is drawn plainly, tokens 2-4 through the acceptance
    rule)."""
    config, params = tiny
    prompt, n, length = prompts_of(3, 1)[0], 1024, 4
    sp = SamplingParams(temperature=1.0, top_k=2, max_new_tokens=length)
    spec = generate(config, params, [prompt], n, sp, jax.random.key(5), segment_len=16,
                    speculative=SpecConfig(draft_len=3))
    assert spec.stats["spec/accepted"] > n // 8  # the acceptance path runs many times
    want = exact_joint(config, params, prompt, sp, length)
    assert abs(sum(want.values()) - 1) < 1e-6
    got = {seq: 0 for seq in want}
    for row in spec.tokens[:, :length]:
        got[tuple(map(int, row))] += 1  # a sequence outside the support raises KeyError
    for seq, p in want.items():
        assert abs(got[seq] / n - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-9, (seq, got[seq], p)


@pytest.mark.parametrize("field,value", [("draft_len", 0), ("ngram_min", 0),
                                         ("ngram_rows", 0), ("max_rows", -1),
                                         ("drafter", "eagle"), ("draft_len", 2.0),
                                         ("min_tokens_per_forward", 6.0)])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"speculative.{field}"):
        SpecConfig(**{field: value})


def test_ngram_min_above_max_is_refused():
    with pytest.raises(ValueError, match="ngram_min"):
        SpecConfig(ngram_min=4, ngram_max=3)


def test_speculative_refuses_arms_and_kept_caches(tiny):
    config, params = tiny
    sp = SamplingParams(max_new_tokens=4)
    for kw in ({"keep_partial": True}, {"arms": np.zeros(1, np.int32)}):
        with pytest.raises(ValueError, match="speculative decoding runs without arms"):
            generate(config, params, prompts_of(0, 1), 1, sp, jax.random.key(0),
                     speculative=SpecConfig(), **kw)


@pytest.mark.slow
def test_greedy_speculation_on_a_mesh_equals_one_device(tiny):
    """Rows over 2 batch shards and heads over 2 tensor shards: the same greedy tokens as
    the one-device speculative run (each row's texts follow its place on the mesh)."""
    from models import sharding
    assert jax.device_count() == 8, "conftest must set 8 host devices"
    config, params = tiny
    mesh = sharding.make_mesh((2, 1, 2), devices=jax.devices()[:4])
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    placed = sharding.shard_params(params, config, mesh, act.rules)
    prompts = prompts_of(4, 3)
    sp = SamplingParams(temperature=0.0, max_new_tokens=32)
    one = generate(config, params, prompts, 2, sp, jax.random.key(1), segment_len=16,
                   speculative=SpecConfig())
    many = generate(config, placed, prompts, 2, sp, jax.random.key(1), segment_len=16,
                    sharding=act, speculative=SpecConfig())
    np.testing.assert_array_equal(many.tokens, one.tokens)
    assert many.stats["spec/accepted"] > 0
    # another summation order (sharded contractions): fp32 rounding only
    np.testing.assert_allclose(many.raw_logprobs, one.raw_logprobs, atol=1e-4)
