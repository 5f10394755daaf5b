"""LATR in the flat sampler: the authors' tree phase replayed, copied pages, plain rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models.byte_tokenizer import save_byte_tokenizer
from sampling import LatrConfig, SamplingParams, generate, latr_generate
from sampling.latr import math_symbol_tokens
from tests.sampling import latr_reference
from tests.sampling.test_tree import teacher_forced
from tests.tolerances import fp32_atol

# final-norm gain 6: the random tiny model's next-token distributions get a few likely
# tokens, so the authors' thresholds (p2 > 0.25, p1 - p2 < 0.15) branch a few % of steps
GAIN = 6.0
MAX_NEW = 40
# ended by max_steps, and by full settled groups (a lower fill threshold)
LATRS = [LatrConfig(width=4, lookahead=(4, 6, 8), prune_distance=0.45, max_steps=36),
         LatrConfig(width=4, lookahead=(4, 6, 8), prune_distance=0.45, fill_init=0.6)]


@pytest.fixture(scope="module")
def peaked():
    config = models.get_preset("tiny")
    params = models.init(config, jax.random.key(0))
    return config, dict(params, final_norm=params["final_norm"] * GAIN)


def prompts_of(seed, lengths):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n).tolist() for n in lengths]


def oracle(config, params, prompts):
    """probs_of(rows) for the reference: one teacher-forced forward per step."""
    width = max(map(len, prompts)) + MAX_NEW
    forward = jax.jit(lambda x: jax.nn.softmax(models.apply(config, params, x), -1))

    def probs_of(rows):
        batch = np.zeros((len(rows), width), np.int32)
        ends = []
        for i, r in enumerate(rows):
            seq = prompts[r.prompt] + [max(t, 0) for t in r.tokens]
            batch[i, :len(seq)] = seq
            ends.append(len(seq) - 1)
        probs = np.asarray(forward(jnp.asarray(batch)), np.float64)
        return probs[np.arange(len(rows)), ends]

    return probs_of


@pytest.fixture(scope="module", params=LATRS, ids=["max_steps", "full"])
def replayed(peaked, request):
    config, params = peaked
    latr = request.param
    prompts = prompts_of(10, [6, 11, 9])
    sp = SamplingParams(temperature=1.0, max_new_tokens=MAX_NEW)
    ro = latr_generate(config, params, prompts, latr.width, sp, jax.random.key(0), latr,
                       page_size=4, segment_len=8)
    refs = teacher_forced(config, params, [prompts[i] for i in ro.prompt_index],
                          [ro.completion(r) for r in range(len(ro))])
    reference = latr_reference.tree_phase(
        oracle(config, params, prompts), len(prompts), latr.width, MAX_NEW,
        latr.abs_threshold, latr.rel_threshold, latr.lookahead, latr.prune_distance,
        set(config.eos_token_ids), np.zeros(config.vocab_size, bool), latr.fill_init,
        latr.fill_decay, latr.max_steps)
    return config, latr, ro, refs, reference


@pytest.mark.slow
def test_tree_phase_matches_the_authors_rules(replayed):
    _, latr, ro, refs, (groups, end, counts, margin) = replayed
    # the decode's probabilities and the reference's one full forward differ by rounding
    # only (measured on the tokens drawn); every decision the reference took was 50x
    # further from its threshold or tie, so rounding cannot have flipped one
    gap = max(np.max(np.abs(np.exp(ro.raw_logprobs[r, :len(ref)]) - np.exp(ref)))
              for r, ref in enumerate(refs))
    assert margin > 50 * gap
    assert counts["born"] > 0 and counts["pruned"] > 0 and counts["suppressed"] > 0
    assert end is not None  # the phase ended before the length did
    steps = end + 1
    assert ro.stats["latr/end_step"] == steps
    assert {k: ro.stats[f"latr/{k}"] for k in counts} == counts
    for p, rows in enumerate(groups):
        theirs = [tuple(t for t in r.tokens[:steps] if t != latr_reference.ENDED)
                  for r in rows]
        theirs += [theirs[0]] * (latr.width - len(rows))  # filled with the root's copies
        ours = [tuple(ro.completion(p * latr.width + j)[:steps]) for j in range(latr.width)]
        assert sorted(ours) == sorted(theirs)
        assert ours[0] == theirs[0]  # the root keeps slot 0


@pytest.mark.slow
def test_every_row_reads_its_own_context(replayed):
    # a branch continues from copied pages and keys: its tokens' log-probs under one
    # full forward must be those the decode recorded (a wrong copy is off by O(1))
    config, _, ro, refs, _ = replayed
    for r, ref in enumerate(refs):
        np.testing.assert_allclose(ro.raw_logprobs[r, :len(ref)], ref,
                                   atol=fp32_atol(ref, config.mlp_dim), rtol=0)


@pytest.mark.slow
def test_plain_rows_draw_what_the_flat_sampler_draws(peaked):
    config, params = peaked
    prompts = prompts_of(4, [7, 5])
    sp = SamplingParams(temperature=1.0, top_k=20, max_new_tokens=24)
    latr = LatrConfig(width=2, lookahead=(4,), max_steps=12)
    ro = latr_generate(config, params, prompts, 5, sp, jax.random.key(2), latr,
                       page_size=4, segment_len=8)
    flat = generate(config, params, prompts, 5, sp, jax.random.key(2), page_size=4,
                    segment_len=8)
    plain = [r for r in range(10) if r % 5 >= 2]
    np.testing.assert_array_equal(ro.tokens[plain], flat.tokens[plain])
    np.testing.assert_array_equal(ro.logprobs[plain], flat.logprobs[plain])
    assert ro.stats["kv_pages"] <= flat.stats["kv_pages"]


def test_bad_settings_fail_before_any_compute(peaked):
    config, params = peaked
    sp = SamplingParams(temperature=1.0, max_new_tokens=8)
    with pytest.raises(ValueError, match="latr.width"):
        latr_generate(config, params, [[1, 2]], 2, sp, jax.random.key(0), LatrConfig(width=3))
    with pytest.raises(ValueError, match=r"exempt must be \[512\] bools"):
        latr_generate(config, params, [[1, 2]], 2, sp, jax.random.key(0), LatrConfig(width=2),
                      exempt=np.zeros(10, bool))
    with pytest.raises(ValueError, match="temperature > 0"):
        latr_generate(config, params, [[1, 2]], 2, SamplingParams(temperature=0.0),
                      jax.random.key(0), LatrConfig(width=2))
    for bad in ({"width": 0}, {"width": 2, "abs_threshold": 1.5}, {"width": 2, "lookahead": ()},
                {"width": 2, "max_steps": 0}):
        with pytest.raises(ValueError, match="latr"):
            LatrConfig(**bad)


def test_math_symbol_tokens_follow_the_authors_substring_rule(tmp_path):
    tok = models.load_tokenizer(save_byte_tokenizer(tmp_path))
    exempt = math_symbol_tokens(tok.decode, 256)
    ids = {text: tok.encode(text)[0] for text in ("7", "+", "a", " ", "x")}
    assert exempt[ids["7"]] and exempt[ids["+"]] and exempt[ids[" "]]  # "" is a substring
    assert not exempt[ids["a"]] and not exempt[ids["x"]]
