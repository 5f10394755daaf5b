"""The two-policy lockstep sampler: exact reproduction of the pure samplers at the
rule's extremes, scores, budgets, log-probs against teacher forcing, validation."""

import functools

import jax
import numpy as np
import pytest

import models
from sampling import MixRule, SamplingParams, generate, lockstep_generate
from tests.sampling.test_tree import teacher_forced
from tests.tolerances import fp32_atol

CONFIG = models.get_preset("tiny")
PARAMS = {"base": models.init(CONFIG, jax.random.key(0)),
          "rl": models.init(CONFIG, jax.random.key(1))}
PROMPTS = [np.random.default_rng(0).integers(0, 512, k).tolist() for k in (3, 9, 5)]
N, PAGE_SIZE, SEGMENT_LEN = 2, 4, 8  # 12 new tokens: two segment calls
SP = SamplingParams(temperature=1.0, max_new_tokens=12, stop_token_ids=tuple(range(8)))
SP_TOP_P = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=12,
                          stop_token_ids=tuple(range(8)))
RNG = jax.random.key(3)


@functools.cache
def pure(which, sp=SP):
    """`sampling.generate` of one model alone: what the lockstep must reproduce."""
    return generate(CONFIG, PARAMS[which], PROMPTS, N, sp, RNG, page_size=PAGE_SIZE,
                    segment_len=SEGMENT_LEN)


@functools.cache
def lockstep(rule, sp=SP):
    return lockstep_generate(CONFIG, PARAMS["base"], CONFIG, PARAMS["rl"], PROMPTS, N, sp, rule,
                             RNG, page_size=PAGE_SIZE, segment_len=SEGMENT_LEN)


def close(actual, reference):
    """Equal up to the rounding of two programs (the pure and the lockstep decode)."""
    np.testing.assert_allclose(actual, reference, atol=fp32_atol(reference, CONFIG.mlp_dim),
                               rtol=0)


def generated(ro):
    """[R, max_new_tokens] bool: the positions holding generated tokens."""
    return np.arange(ro.tokens.shape[1])[None] < ro.lengths[:, None]


def assert_same_samples(ro, ref):
    np.testing.assert_array_equal(ro.tokens, ref.tokens)
    np.testing.assert_array_equal(ro.lengths, ref.lengths)
    np.testing.assert_array_equal(ro.finish_reason, ref.finish_reason)


@pytest.mark.parametrize("main", ["base", "rl"])
def test_budget_zero_reproduces_the_main_policy(main):
    assert not np.array_equal(pure("base").tokens, pure("rl").tokens)  # the tests can tell
    out = lockstep(MixRule(main=main, criterion="all", budget=0.0))
    assert_same_samples(out.rollouts, pure(main))
    assert not out.replaced.any() and out.stats["replaced_fraction"] == 0.0
    # nothing fired: the emitted tokens are the main's draws, with its log-probs
    close(out.rollouts.raw_logprobs, pure(main).raw_logprobs)
    close(out.rollouts.logprobs, pure(main).logprobs)
    close(out.logp_base if main == "base" else out.logp_rl, pure(main).raw_logprobs)


@pytest.mark.parametrize("rule,sp", [
    (MixRule(criterion="all"), SP),
    (MixRule(criterion="js", threshold=0.0), SP_TOP_P),
], ids=["all", "js-top_p"])
def test_always_firing_reproduces_the_other_policy(rule, sp):
    out = lockstep(rule, sp)
    assert_same_samples(out.rollouts, pure("rl", sp))
    mask = generated(out.rollouts)
    np.testing.assert_array_equal(out.replaced, mask)
    assert out.stats["replaced_fraction"] == 1.0
    # drawn from the rl model's distribution; raw log-probs under the main (base)
    close(out.rollouts.logprobs, pure("rl", sp).logprobs)
    close(out.logp_rl, pure("rl", sp).raw_logprobs)
    np.testing.assert_array_equal(out.rollouts.raw_logprobs, out.logp_base)
    assert np.all(out.score[mask] >= 0.0)


def test_extrapolate_at_gamma_zero_reproduces_rl():
    out = lockstep(MixRule(mode="extrapolate", criterion="all", gamma=0.0))
    assert_same_samples(out.rollouts, pure("rl"))
    np.testing.assert_array_equal(out.replaced, generated(out.rollouts))


def test_delta_logp_score_and_firing():
    rule = MixRule(criterion="delta_logp", threshold=0.0)
    out = lockstep(rule)
    mask = generated(out.rollouts)
    kept, fired = mask & ~out.replaced, out.replaced
    assert kept.any() and fired.any()
    # where nothing fired the token is the base's candidate: score = logp_base - logp_rl
    np.testing.assert_array_equal(out.score[kept], out.logp_base[kept] - out.logp_rl[kept])
    assert np.all(out.score[kept] < rule.threshold)
    assert out.stats["replaced_tokens"] == fired.sum()
    assert out.stats["replaced_fraction"] == fired.sum() / mask.sum()
    # temperature 1, no filters: the sampling log-prob is that of the model drawn from
    expected = np.where(out.replaced, out.logp_rl, out.logp_base)
    np.testing.assert_allclose(out.rollouts.logprobs[mask], expected[mask], atol=1e-6)


def test_budget_caps_the_replacements_per_row():
    rule = MixRule(criterion="random", threshold=0.0, budget=0.25)
    out = lockstep(rule)
    per_row = out.replaced.sum(axis=1)
    cap = int(0.25 * SP.max_new_tokens)
    assert np.all(per_row <= cap)
    # the random score is always >= 0: each row fires on its first `cap` tokens
    np.testing.assert_array_equal(per_row, np.minimum(out.rollouts.lengths, cap))
    assert np.all(out.replaced[:, :cap] == generated(out.rollouts)[:, :cap])
    assert np.all((out.score >= 0.0) & (out.score < 1.0))
    assert out.stats["replaced_fraction"] == per_row.sum() / out.stats["decode_tokens"]


@pytest.mark.parametrize("arch", ["same", "other"])
def test_logprobs_match_teacher_forcing(arch):
    rule = MixRule(criterion="delta_logp", threshold=0.0)
    if arch == "same":
        rl_config, rl_params = CONFIG, PARAMS["rl"]
        out = lockstep(rule)
    else:  # another architecture and an eos id of its own
        rl_config = CONFIG.replace(family="qwen3", num_layers=2, num_kv_heads=4, mlp_dim=512,
                                   eos_token_ids=(9,))
        rl_params = models.init(rl_config, jax.random.key(2))
        out = lockstep_generate(CONFIG, PARAMS["base"], rl_config, rl_params, PROMPTS, N, SP,
                                rule, RNG, page_size=PAGE_SIZE, segment_len=SEGMENT_LEN)
    ro = out.rollouts
    completions = [ro.completion(r) for r in range(len(ro))]
    prompts = [PROMPTS[i] for i in ro.prompt_index]
    assert out.replaced.any() and not out.replaced[generated(ro)].all()
    for config, params, logp in ((CONFIG, PARAMS["base"], out.logp_base),
                                 (rl_config, rl_params, out.logp_rl)):
        for r, ref in enumerate(teacher_forced(config, params, prompts, completions)):
            np.testing.assert_allclose(logp[r, :len(ref)], ref,
                                       atol=fp32_atol(ref, config.mlp_dim), rtol=0)
            assert np.all(logp[r, len(ref):] == 0.0)
    np.testing.assert_array_equal(ro.raw_logprobs, out.logp_base)
    stops = set(SP.stop_token_ids) | set(rl_config.eos_token_ids)
    for r, completion in enumerate(completions):
        assert not stops & set(completion[:-1])
        assert (ro.finish_reason[r] == "stop") == (completion[-1] in stops)


@pytest.mark.parametrize("kwargs,match", [
    ({"mode": "mix"}, "mode must be one of replace, extrapolate"),
    ({"main": "assistant"}, "main must be one of base, rl"),
    ({"criterion": "delta"}, "criterion must be one of delta_logp"),
    ({"threshold": float("nan")}, "threshold must be a number"),
    ({"threshold": "0.3"}, "threshold must be a number"),
    ({"budget": 1.5}, r"budget must be a number in \[0, 1\]"),
    ({"budget": -0.1}, r"budget must be a number in \[0, 1\]"),
    ({"gamma": float("inf")}, "gamma must be a finite number"),
    ({"gamma": True}, "gamma must be a finite number"),
])
def test_mix_rule_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MixRule(**kwargs)


def test_mix_rule_is_hashable_and_normalised():
    assert MixRule(threshold=1, budget=1) == MixRule(threshold=1.0, budget=1.0)
    assert hash(MixRule(threshold=1)) == hash(MixRule(threshold=1.0))
    assert MixRule(budget=0.25).cap(12) == 3 and MixRule(budget=0.3).cap(10) == 3


def test_mismatched_vocab_sizes_are_refused():
    small = CONFIG.replace(vocab_size=256)
    with pytest.raises(ValueError, match="vocab sizes differ: 512 != 256"):
        lockstep_generate(CONFIG, PARAMS["base"], small, None, PROMPTS, N, SP, MixRule(), RNG)


def test_delta_logp_replacement_is_an_independent_draw():
    """A delta_logp rule that always fires takes every token from the RL model, but
    with its own key (fold_in(key, 1)): the firing depends on the base's draw, so
    reusing that draw's uniform would bias the replacement. Its tokens are then not
    the pure RL samples of the same seed (those of the `all` criterion are)."""
    out = lockstep(MixRule(criterion="delta_logp", threshold=float("-inf")))
    assert out.replaced[generated(out.rollouts)].all()
    assert not np.array_equal(out.rollouts.tokens, pure("rl").tokens)
    close(out.rollouts.logprobs[generated(out.rollouts)],
          out.logp_rl[generated(out.rollouts)])


def test_infinite_threshold_never_fires():
    out = lockstep(MixRule(criterion="all", threshold=float("inf")))
    assert not out.replaced.any()
    assert_same_samples(out.rollouts, pure("base"))


def test_thresholds_budgets_and_gammas_share_one_program():
    from sampling import engine

    lockstep(MixRule(mode="extrapolate", criterion="js", threshold=0.1, gamma=0.1))
    before = engine.TRACE_COUNTS["lockstep_decode"]
    for threshold, budget, gamma in ((0.0, 1.0, 0.0), (0.3, 0.5, 0.5), (float("inf"), 0.0, 1.0)):
        lockstep(MixRule(mode="extrapolate", criterion="js", threshold=threshold,
                         budget=budget, gamma=gamma))
    assert engine.TRACE_COUNTS["lockstep_decode"] == before
