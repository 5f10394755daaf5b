"""The tree sampler: shared prefixes, exact leaf counts, no page leaks, determinism."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from rl import advantages
from sampling import engine
from sampling.params import SamplingParams
from sampling.tree import TreeConfig, tree_generate
from tests.tolerances import fp32_atol

TREE = TreeConfig(segment_len=8, max_depth=4, leaves_per_prompt=6, first_branching=(2, 3),
                  page_size=4)
# many stop tokens: leaves finish at different depths and fallback is exercised
SAMPLING = SamplingParams(temperature=1.0, stop_token_ids=tuple(range(7, 40)))


@pytest.fixture(scope="module")
def tiny():
    config = models.get_preset("tiny")
    return config, models.init(config, jax.random.key(0))


def prompts_for(seed, lengths):
    rng = np.random.default_rng(seed)
    return [rng.integers(40, 512, n).tolist() for n in lengths]


def teacher_forced(config, params, prompts, completions):
    """Per-token log-probs of each completion from one right-padded forward pass."""
    seqs = [p + c for p, c in zip(prompts, completions, strict=True)]
    width = max(map(len, seqs))
    batch = np.zeros((len(seqs), width), np.int32)
    for i, seq in enumerate(seqs):
        batch[i, :len(seq)] = seq
    logp = np.asarray(jax.nn.log_softmax(models.apply(config, params, jnp.asarray(batch)), -1))
    return [logp[i, len(p) - 1 + np.arange(len(c)), c]
            for i, (p, c) in enumerate(zip(prompts, completions, strict=True))]


def check_tree(ro, tree, num_prompts):
    """Leaf counts, finish reasons and prefix structure of one tree rollout."""
    assert collections.Counter(ro.prompt_index.tolist()) == {
        i: tree.leaves_per_prompt for i in range(num_prompts)}
    seg = tree.segment_len
    for r in range(len(ro)):
        depth = int((ro.paths[r] >= 0).sum())
        assert np.all(ro.paths[r, :depth] >= 0) and np.all(ro.paths[r, depth:] == -1)
        # full segments on the path, then this leaf's own (possibly short) one
        assert (depth - 1) * seg < ro.lengths[r] <= depth * seg
        if ro.finish_reason[r] == "stop":
            assert ro.completion(r)[-1] in SAMPLING.stop_token_ids
        else:
            assert ro.finish_reason[r] in ("length", "repetition")
    keys = [(int(ro.prompt_index[r]), tuple(ro.paths[r])) for r in range(len(ro))]
    assert len(set(keys)) == len(keys), "two leaves with the same path"
    for a in range(len(ro)):
        for b in range(a + 1, len(ro)):
            if ro.prompt_index[a] != ro.prompt_index[b]:
                continue
            shared = 0
            while (shared < tree.max_depth and ro.paths[a, shared] >= 0
                   and ro.paths[a, shared] == ro.paths[b, shared]):
                shared += 1
            # leaves sharing d branch ids share exactly those d segments' tokens
            np.testing.assert_array_equal(ro.tokens[a, :shared * seg], ro.tokens[b, :shared * seg])


def test_leaves_match_teacher_forcing_and_structure(tiny):
    config, params = tiny
    prompts = prompts_for(0, [5, 17, 9])
    ro = tree_generate(config, params, prompts, TREE, SAMPLING, jax.random.key(3))
    check_tree(ro, TREE, 3)
    assert ro.stats["pages_in_use_after_release"] == 0
    ref = teacher_forced(config, params, [prompts[i] for i in ro.prompt_index],
                         [ro.completion(r) for r in range(len(ro))])
    for r, want in enumerate(ref):
        # paged tree decode vs one full forward: other summation orders; longest: mlp_dim
        np.testing.assert_allclose(ro.raw_logprobs[r, :len(want)], want,
                                   atol=fp32_atol(want, config.mlp_dim), rtol=0)


def test_shared_prefixes_are_decoded_once(tiny):
    config, params = tiny
    tree = TreeConfig(segment_len=8, max_depth=3, leaves_per_prompt=8, first_branching=2,
                      page_size=4)
    ro = tree_generate(config, params, prompts_for(1, [10, 10]), tree,
                       SamplingParams(temperature=1.0), jax.random.key(0))
    check_tree(ro, tree, 2)
    # no stop tokens: every leaf is 24 tokens, but shared segments run once
    assert np.all(ro.lengths == 24)
    assert ro.stats["decode_tokens"] < ro.lengths.sum()
    assert ro.stats["prefill_tokens"] == 20
    # the paths feed the TreePO advantage directly
    rewards = (ro.tokens[:, -1] % 2).astype(np.float32)
    adv = np.asarray(advantages.compute("tree", rewards, ro.group_ids(), paths=ro.paths))
    assert adv.shape == (16,) and np.all(np.isfinite(adv))


def test_same_seed_same_tree(tiny):
    config, params = tiny
    prompts = prompts_for(2, [6, 11])
    a = tree_generate(config, params, prompts, TREE, SAMPLING, jax.random.key(7))
    b = tree_generate(config, params, prompts, TREE, SAMPLING, jax.random.key(7))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.paths, b.paths)
    c = tree_generate(config, params, prompts, TREE, SAMPLING, jax.random.key(8))
    assert not np.array_equal(a.tokens, c.tokens)


@pytest.mark.parametrize("policy", ["low_likelihood", "high_likelihood"])
def test_branch_policies(tiny, policy):
    config, params = tiny
    tree = TreeConfig(segment_len=8, max_depth=3, leaves_per_prompt=7, first_branching=2,
                      page_size=4, branch_policy=policy, repetition_ngram=2, repetition_count=3)
    ro = tree_generate(config, params, prompts_for(3, [8]), tree, SAMPLING, jax.random.key(1))
    check_tree(ro, tree, 1)


@pytest.mark.slow
def test_no_page_leak_over_100_random_trees(tiny):
    config, params = tiny
    tree = TreeConfig(segment_len=4, max_depth=3, leaves_per_prompt=4, first_branching=(1, 3),
                      page_size=4)
    rng = np.random.default_rng(0)
    before = engine.TRACE_COUNTS["decode"]
    for trial in range(100):
        lengths = rng.integers(1, 5, 2)  # 2 prompts in one length bucket
        ro = tree_generate(config, params, prompts_for(trial, lengths), tree, SAMPLING,
                           jax.random.key(trial))
        check_tree(ro, tree, len(lengths))
        assert ro.stats["pages_in_use_after_release"] == 0
    # decode shapes: row buckets 1..8 (4 values) x prefix widths (max_depth values)
    assert engine.TRACE_COUNTS["decode"] - before <= 4 * tree.max_depth


def test_config_errors():
    with pytest.raises(ValueError, match="multiple of page_size"):
        TreeConfig(segment_len=10, page_size=4)
    with pytest.raises(ValueError, match="branch_policy"):
        TreeConfig(branch_policy="greedy")
    with pytest.raises(ValueError, match="first_branching"):
        TreeConfig(first_branching=(3, 2))
    with pytest.raises(ValueError, match="leaves_per_prompt"):
        TreeConfig(leaves_per_prompt=0)


def test_leaves_never_exceed_max_new_tokens(tiny):
    config, params = tiny
    tree = TreeConfig(segment_len=8, max_depth=4, leaves_per_prompt=4, page_size=4)
    with pytest.raises(ValueError, match="32 tokens, more than max_new_tokens=16"):
        tree_generate(config, params, prompts_for(0, [4]), tree,
                      SamplingParams(temperature=1.0, max_new_tokens=16), jax.random.key(0))
