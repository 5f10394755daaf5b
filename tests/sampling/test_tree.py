"""The tree sampler: shared prefixes, exact leaf counts, no page leaks, determinism,
and the authors' round rules (sampling/tree_schedule.py): boxed stop, budget
transfer, repetition stop, fallback pool."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from configs.base import sampling_section
from rl.algorithms import advantages
from rl.rewards.latex import complete_box
from rl.train.build import _tree
from sampling import engine, tree_schedule
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


def boxed_stop(ro, r, decode) -> bool:
    """Leaf r ends right after the token that completes a box in its text."""
    tokens = ro.completion(r)
    return (decode is not None and complete_box(decode(tokens))
            and not complete_box(decode(tokens[:-1])))


def check_tree(ro, tree, num_prompts, decode=None):
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
            assert ro.completion(r)[-1] in SAMPLING.stop_token_ids or boxed_stop(ro, r, decode)
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
def test_no_page_leak_over_20_random_trees(tiny, monkeypatch):
    config, params = tiny
    tree = TreeConfig(segment_len=4, max_depth=3, leaves_per_prompt=4, first_branching=(1, 3),
                      page_size=4)
    rng = np.random.default_rng(0)
    shapes = set()
    real_decode = engine.decode

    def recording_decode(config, params, cache, state, *args):
        p = state.pages
        shapes.add((p.row_group.shape, p.group_rows.shape, p.group_tables.shape,
                    None if p.own_tables is None else p.own_tables.shape))
        return real_decode(config, params, cache, state, *args)

    monkeypatch.setattr(engine, "decode", recording_decode)
    before = engine.TRACE_COUNTS["decode"]
    for trial in range(20):
        lengths = rng.integers(1, 5, 2)  # 2 prompts in one length bucket
        ro = tree_generate(config, params, prompts_for(trial, lengths), tree, SAMPLING,
                           jax.random.key(trial))
        check_tree(ro, tree, len(lengths))
        assert ro.stats["pages_in_use_after_release"] == 0
    # one trace per decode shape: rows, groups and rows per group are powers of
    # two <= 8 (4 values each) and the prefix width takes max_depth values
    traces = engine.TRACE_COUNTS["decode"] - before
    assert traces <= len(shapes) <= 4 * 4 * 4 * tree.max_depth


def test_config_errors():
    with pytest.raises(ValueError, match="multiple of page_size"):
        TreeConfig(segment_len=10, page_size=4)
    with pytest.raises(ValueError, match="branch_policy"):
        TreeConfig(branch_policy="greedy")
    with pytest.raises(ValueError, match="first_branching"):
        TreeConfig(first_branching=(3, 2))
    with pytest.raises(ValueError, match="leaves_per_prompt"):
        TreeConfig(leaves_per_prompt=0)
    with pytest.raises(ValueError, match="repetition_chars"):
        TreeConfig(repetition_chars=-1)


def test_leaves_never_exceed_max_new_tokens(tiny):
    config, params = tiny
    tree = TreeConfig(segment_len=8, max_depth=4, leaves_per_prompt=4, page_size=4)
    with pytest.raises(ValueError, match="32 tokens, more than max_new_tokens=16"):
        tree_generate(config, params, prompts_for(0, [4]), tree,
                      SamplingParams(temperature=1.0, max_new_tokens=16), jax.random.key(0))


# -- the authors' round rules ------------------------------------------------------------------

def text_decode(pieces):
    """A fake detokenizer: token t is pieces(t)."""
    return lambda ids: "".join(pieces(int(t)) for t in ids)


# 1 token in 11 opens a box, 1 in 11 closes a brace, the rest are letters
BOX_DECODE = text_decode(lambda t: {0: "\\boxed{", 1: "}", 2: "5"}.get(t % 11, "a"))
PLAIN = SamplingParams(temperature=1.0)


def test_complete_box():
    for text in ["\\boxed{5}", "x \\boxed{\\frac{1}{2}} y", "\\boxed{5} then \\boxed{",
                 "\\fbox{3}", "\\boxed {7}"]:
        assert complete_box(text), text
    for text in ["", "\\boxed{5", "\\boxed 5", "\\boxed{\\frac{1}{2}", "boxed{5}", "}\\boxed{"]:
        assert not complete_box(text), text


def test_segment_finish_rules():
    """Order: repetition, stop token, the text rule (a box: cut after it), max depth."""
    decode = text_decode(lambda t: {0: "\\boxed{", 1: "}", 2: "5", 3: "x" * 40}.get(t, "a"))
    tree = TreeConfig(segment_len=8, max_depth=3, page_size=4)
    seg = np.array([2, 1, 9, 9])  # "5}aa": completes a box opened in an earlier segment
    opened = np.array([9, 0])
    box = complete_box

    def finish(segment, before, stopped, depth, decode=decode, stop_text=box):
        return tree_schedule.segment_finish(segment, before, stopped, depth, tree, decode,
                                            stop_text)

    assert finish(seg, opened, False, 1) == ("stop", 2)
    assert finish(np.array([9, 0, 2, 1, 9, 9]), np.zeros(0), False, 1) == ("stop", 4)
    # a stop token keeps the whole segment, box or not
    assert finish(seg, opened, True, 1) == ("stop", 4)
    # no box: continue, or "length" at max_depth
    assert finish(seg, np.zeros(0), False, 2) == ("", 4)
    assert finish(seg, np.zeros(0), False, 3) == ("length", 4)
    # no decode, or no text rule: the box is not seen
    assert finish(seg, opened, False, 1, decode=None) == ("", 4)
    assert finish(seg, opened, False, 1, stop_text=None) == ("", 4)
    # repetition first: 40 x's hold a 32-char substring 9 times, even with a stop token
    loop = np.array([0, 2, 3, 1])
    assert tree_schedule.segment_finish(loop, np.zeros(0), True, 1, tree, decode) == (
        "repetition", 4)
    # without decode the token check: an 8-gram 8 times
    tokens = np.array([5] * 15)
    assert tree_schedule.segment_finish(tokens, np.zeros(0), False, 1, tree, None) == (
        "repetition", 15)
    assert tree_schedule.segment_finish(tokens[:14], np.zeros(0), False, 1, tree, None) == (
        "", 14)


def test_repetition_checks_and_defaults():
    tree = TreeConfig()
    assert (tree.repetition_chars, tree.repetition_ngram, tree.repetition_count) == (32, 8, 8)
    unit = "the same sentence over and over; "  # 33 characters
    assert tree_schedule.char_repetition(unit * 8)
    assert not tree_schedule.char_repetition(unit * 7)
    assert not tree_schedule.char_repetition(unit * 8, length=0)
    assert tree_schedule.token_repetition(np.tile(np.arange(8), 8), 8, 8)
    assert not tree_schedule.token_repetition(np.tile(np.arange(8), 8)[:-1], 8, 8)
    assert not tree_schedule.token_repetition(np.zeros(100, int), 0, 8)


def test_budget_transfer_gives_more_than_divergence():
    # 10 leaves still wanted, 2 nodes continue, 3 siblings finished: 2 × (2 + 3) = 10
    total = tree_schedule.branch_total(remaining=10, continuing=2, finished_now=3, divergence=2)
    assert total == 10
    assert tree_schedule.allocate(total, 2) == [5, 5]  # 5 > divergence each
    # capped by the remaining budget; the remainder goes to the last node (fixed_avg)
    assert tree_schedule.branch_total(7, 3, 4, 2) == 7
    assert tree_schedule.allocate(7, 3) == [2, 2, 3]
    # nobody finished: w each; at least one child per continuing node
    assert tree_schedule.branch_total(16, 3, 0, 2) == 6
    assert tree_schedule.branch_total(3, 3, 0, 2) == 3
    assert tree_schedule.allocate(3, 3) == [1, 1, 1]


def test_likelihood_policies_split_the_same_total():
    # weights [0.5, 0.3, 0.2], total 7: 1 each, then 4 × w = [2, 1.2, 0.8] ->
    # floors [2, 1, 0], the last unit to the largest remainder (0.8)
    assert tree_schedule.largest_remainder(np.array([0.5, 0.3, 0.2]), 7) == [3, 2, 2]
    logp = np.array([-1.0, -3.0])
    # low_likelihood: softmax(-(logp - min)) = softmax([-2, 0]) = [0.119, 0.881];
    # 4 extra -> [0.48, 3.52] -> floors [0, 3], remainder to node 1 -> [1, 5]
    assert tree_schedule.allocate(6, 2, "low_likelihood", logp) == [1, 5]
    assert tree_schedule.allocate(6, 2, "high_likelihood", logp) == [5, 1]
    assert tree_schedule.allocate(2, 2, "low_likelihood", logp) == [1, 1]


def test_fallback_pool_prefers_properly_finished_leaves():
    finishes, depths = ["length", "stop", "repetition", "stop"], [4, 3, 2, 2]
    for seed in range(20):
        plan = tree_schedule.fallback_plan(finishes, depths, 3, 2, np.random.default_rng(seed))
        assert sorted(j for j, _, _ in plan) == [1, 3]
        assert sorted(count for _, _, count in plan) == [1, 2]  # divergence, then the rest
        assert all(0 <= keep < depths[j] for j, keep, _ in plan)
    # only the budget's worth of leaves
    assert len(tree_schedule.fallback_plan(finishes, depths, 2, 2, np.random.default_rng(0))) == 1
    # no leaf ended properly: restart from the prompt, divergence children
    assert tree_schedule.fallback_plan(["length", "repetition"], [4, 1], 5, 2,
                                       np.random.default_rng(0)) == [(-1, 0, 2)]
    assert tree_schedule.fallback_plan(["stop"], [2], 0, 2, np.random.default_rng(0)) == []


def test_boxed_answer_stops_and_cuts_paths(tiny):
    config, params = tiny
    tree = TreeConfig(segment_len=8, max_depth=4, leaves_per_prompt=8, first_branching=(2, 3),
                      page_size=4)
    prompts = prompts_for(4, [7, 12])
    ro = tree_generate(config, params, prompts, tree, PLAIN, jax.random.key(5),
                       decode=BOX_DECODE, stop_text=complete_box)
    check_tree(ro, tree, 2, decode=BOX_DECODE)
    assert ro.stats["pages_in_use_after_release"] == 0
    boxed = [r for r in range(len(ro)) if ro.finish_reason[r] == "stop"]
    assert boxed and all(boxed_stop(ro, r, BOX_DECODE) for r in boxed)
    # a cut leaf is shorter than its segments, and no other leaf holds a box
    assert any(ro.lengths[r] % tree.segment_len for r in boxed)
    for r in range(len(ro)):
        if r not in boxed:
            assert not complete_box(BOX_DECODE(ro.completion(r)))
    # log-probs stay aligned with the cut tokens
    ref = teacher_forced(config, params, [prompts[i] for i in ro.prompt_index],
                         [ro.completion(r) for r in range(len(ro))])
    for r, want in enumerate(ref):
        np.testing.assert_allclose(ro.raw_logprobs[r, :len(want)], want,
                                   atol=fp32_atol(want, config.mlp_dim), rtol=0)
        assert np.all(ro.raw_logprobs[r, len(want):] == 0)
    # without a text rule boxes are not looked for; a rule without a decode is refused
    plain = tree_generate(config, params, prompts, tree, PLAIN, jax.random.key(5),
                          decode=BOX_DECODE)
    check_tree(plain, tree, 2)
    assert not np.any(plain.finish_reason == "stop")
    with pytest.raises(ValueError, match="stop_text needs decode"):
        tree_generate(config, params, prompts, tree, PLAIN, jax.random.key(5),
                      stop_text=complete_box)


def test_repetitive_text_stops_and_restarts_from_the_prompt(tiny):
    """Every segment repeats itself: all leaves are depth-1 "repetition" leaves, and
    with no properly finished leaf the fallback restarts from the prompt."""
    config, params = tiny
    tree = TreeConfig(segment_len=8, max_depth=3, leaves_per_prompt=5, first_branching=2,
                      page_size=4)
    ro = tree_generate(config, params, prompts_for(5, [6, 9]), tree, PLAIN, jax.random.key(2),
                       decode=text_decode(lambda t: "ab" * 4))
    check_tree(ro, tree, 2)
    assert set(ro.finish_reason) == {"repetition"}
    assert np.all(ro.paths[:, 1:] == -1) and np.all(ro.lengths == tree.segment_len)
    assert ro.stats["fallback_children"] == 2 * (5 - 2)
    assert ro.stats["finish_repetition"] == 10
    assert ro.stats["pages_in_use_after_release"] == 0


def test_tree_config_from_the_config_section():
    s = sampling_section()
    s.sampler, s.max_new_tokens, s.page_size = "tree", 64, 16
    default = _tree(s)
    assert default.repetition_chars == 32
    s.tree.stop_on_boxed, s.tree.repetition_chars, s.tree.repetition_ngram = False, 16, 0
    tree = _tree(s)
    assert (tree.repetition_chars, tree.repetition_ngram) == (16, 0)


def test_finished_siblings_hand_their_children_to_the_others(tiny, monkeypatch):
    """In a real tree some node gets more than `divergence` children, always by
    the authors' rule: min(rem, w × (continuing + finished)) split fixed_avg."""
    config, params = tiny
    calls = []
    allocate = tree_schedule.allocate

    def recording(total, k, *args):
        counts = allocate(total, k, *args)
        calls.append((total, k, counts))
        return counts

    monkeypatch.setattr(tree_schedule, "allocate", recording)
    tree = TreeConfig(segment_len=8, max_depth=4, leaves_per_prompt=12, first_branching=2,
                      page_size=4)
    ro = tree_generate(config, params, prompts_for(6, [5, 8, 11]), tree, SAMPLING,
                       jax.random.key(4))
    check_tree(ro, tree, 3)
    assert ro.stats["pages_in_use_after_release"] == 0
    assert all(sum(counts) == total and min(counts) >= 1 for total, _, counts in calls)
    assert all(counts == tree_schedule.fixed_avg(total, k) for total, k, counts in calls)
    assert max(max(counts) for _, _, counts in calls) > tree.divergence
