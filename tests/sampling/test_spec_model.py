"""The small-model drafter of speculative decoding (`sampling.spec_model`)."""

import dataclasses

import jax
import numpy as np
import pytest

import models
from sampling.flat import generate
from sampling.params import SamplingParams
from sampling.spec_decode import SpecConfig
from tests.sampling.test_spec_decode import exact_joint, prompts_of

MODEL = SpecConfig(draft_len=3, drafter="model")


@pytest.fixture(scope="module")
def tiny():
    config = models.get_preset("tiny")
    return config, models.init(config, jax.random.key(0))


@pytest.fixture(scope="module")
def other(tiny):
    """A drafter unrelated to the policy: another random tiny model."""
    config, _ = tiny
    return config, models.init(config, jax.random.key(7))


def test_greedy_tokens_are_plain_decodings_whatever_the_drafter(tiny, other):
    config, params = tiny
    prompts = prompts_of(0, 2)
    sp = SamplingParams(temperature=0.0, max_new_tokens=40)
    first = generate(config, params, prompts, 2, sp, jax.random.key(1), segment_len=16)
    sp = dataclasses.replace(sp, stop_token_ids=(int(first.tokens[0, 17]),))
    kw = dict(segment_len=16, max_new_tokens_per_row=np.array([40, 9, 23, 40]))
    plain = generate(config, params, prompts, 2, sp, jax.random.key(1), **kw)
    assert (plain.finish_reason == "stop").any() and (plain.finish_reason == "length").any()
    for drafter in (other, tiny):
        spec = generate(config, params, prompts, 2, sp, jax.random.key(2), **kw,
                        speculative=MODEL, draft_model=drafter)
        np.testing.assert_array_equal(spec.tokens, plain.tokens)
        np.testing.assert_array_equal(spec.finish_reason, plain.finish_reason)
        # the chunk forward sums in another order than one token's: fp32 rounding only
        np.testing.assert_allclose(spec.raw_logprobs, plain.raw_logprobs, atol=2e-5)
        assert spec.stats["spec/calls"] == 3
    assert spec.stats["spec/accepted"] > 0.9 * spec.stats["spec/proposed"]  # the policy itself


def test_the_drafters_cache_follows_plain_and_speculative_calls(tiny):
    """The policy as its own drafter keeps every greedy draft only if the drafter's cache
    holds exactly the rows' tokens: after a plain call that fed it (4 rows running > 1)
    and after speculative calls whose last drafts were kept or not."""
    config, params = tiny
    sp = SamplingParams(temperature=0.0, max_new_tokens=48)
    kw = dict(segment_len=16, max_new_tokens_per_row=np.array([48, 16, 16, 16]))
    plain = generate(config, params, prompts_of(1, 4), 1, sp, jax.random.key(1), **kw)
    spec = generate(config, params, prompts_of(1, 4), 1, sp, jax.random.key(1), **kw,
                    speculative=dataclasses.replace(MODEL, max_rows=1), draft_model=tiny)
    np.testing.assert_array_equal(spec.tokens, plain.tokens)
    s = spec.stats
    assert s["spec/calls"] == 2 and s["spec/tokens"] == 32  # segments 2 and 3
    assert s["spec/accepted"] == s["spec/proposed"] > 0
    assert s["spec/row_forwards"] < s["spec/tokens"] / 2


@pytest.mark.slow
def test_sampled_sequences_follow_the_policys_distribution(tiny):
    """As the n-gram drafter's test: every 4-token sequence's frequency within 5 binomial
    standard errors of its exact probability (top-k 2). The drafter is the policy with
    noise on its weights, so it samples from a q close to p but not equal: most drafts are
    kept and the residual max(0, p - q) is drawn from at the rejections."""
    config, params = tiny
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(3), len(leaves))
    noisy = jax.tree.unflatten(tree, [x + 0.3 * x.std() * jax.random.normal(k, x.shape, x.dtype)
                                      for x, k in zip(leaves, keys, strict=True)])
    prompt, n, length = prompts_of(3, 1)[0], 1024, 4
    sp = SamplingParams(temperature=1.0, top_k=2, max_new_tokens=length)
    spec = generate(config, params, [prompt], n, sp, jax.random.key(5), segment_len=16,
                    speculative=MODEL, draft_model=(config, noisy))
    s = spec.stats
    assert n // 4 < s["spec/accepted"] < s["spec/proposed"] - n // 4  # kept and rejected
    want = exact_joint(config, params, prompt, sp, length)
    got = {seq: 0 for seq in want}
    for row in spec.tokens[:, :length]:
        got[tuple(map(int, row))] += 1  # a sequence outside the support raises KeyError
    for seq, p in want.items():
        assert abs(got[seq] / n - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-9, (seq, got[seq], p)


def test_a_drafter_is_refused_where_it_cannot_draft(tiny):
    config, params = tiny
    sp = SamplingParams(max_new_tokens=4)
    call = lambda **kw: generate(config, params, prompts_of(0, 1), 1, sp,  # noqa: E731
                                 jax.random.key(0), **kw)
    with pytest.raises(ValueError, match="drafter='model' takes a draft_model"):
        call(speculative=MODEL)
    with pytest.raises(ValueError, match="drafter='ngram' takes no draft_model"):
        call(speculative=SpecConfig(), draft_model=tiny)
    with pytest.raises(ValueError, match="speculative decoding is off"):
        call(draft_model=tiny)
    small = models.get_preset("small")
    with pytest.raises(ValueError, match="vocab_size"):
        call(speculative=MODEL, draft_model=(dataclasses.replace(small, vocab_size=256), None))


@pytest.mark.slow
def test_greedy_model_drafting_on_a_mesh_equals_one_device(tiny):
    """Rows over 2 batch shards and heads over 2 tensor shards, both models placed on the
    mesh: the one-device run's greedy tokens and counts."""
    from models import sharding
    assert jax.device_count() == 8, "conftest must set 8 host devices"
    config, params = tiny
    mesh = sharding.make_mesh((2, 1, 2), devices=jax.devices()[:4])
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    place = lambda p: sharding.shard_params(p, config, mesh, act.rules)  # noqa: E731
    prompts = prompts_of(4, 3)
    sp = SamplingParams(temperature=0.0, max_new_tokens=32)
    kw = dict(segment_len=16, max_new_tokens_per_row=np.array([32, 12, 32, 5, 32, 32]),
              speculative=dataclasses.replace(MODEL, max_rows=4))
    one = generate(config, params, prompts, 2, sp, jax.random.key(1), draft_model=tiny, **kw)
    many = generate(config, place(params), prompts, 2, sp, jax.random.key(1), sharding=act,
                    draft_model=(config, place(tiny[1])), **kw)
    np.testing.assert_array_equal(many.tokens, one.tokens)
    # segment 1 plain (6 rows run), segment 2 speculative (the rows of budget 12 and 5 done)
    assert many.stats["spec/calls"] == one.stats["spec/calls"] == 1
    assert many.stats["spec/accepted"] == one.stats["spec/accepted"] > 0
    # another summation order (sharded contractions): fp32 rounding only
    np.testing.assert_allclose(many.raw_logprobs, one.raw_logprobs, atol=1e-4)
