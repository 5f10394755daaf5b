"""The decode with the layers unrolled (`scan_layers=False`: one tail array per layer,
`models.decode_tails.split_layers`) draws what the scanned decode draws: flat (page
attention and the dense view), tree, LATR's row copies, a drafter that scans beside a
policy that does not, and on a mesh."""

import jax
import numpy as np
import pytest

import models
from models import sharding
from sampling import engine
from sampling import (LatrConfig, SamplingParams, SpecConfig, TreeConfig, generate,
                      latr_generate, tree_generate)
from tests.tolerances import fp32_atol

SP = SamplingParams(temperature=1.0, max_new_tokens=20)


@pytest.fixture(scope="module")
def tiny():
    config = models.get_preset("tiny").replace(num_layers=2)
    return config, models.init(config, jax.random.key(0))


def prompts_of(seed, lengths, vocab=512):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, n).tolist() for n in lengths]


def same(a, b, config):
    """Equal tokens; log-probs up to fp32 rounding: the same products, but XLA fuses an
    unrolled body otherwise than a scanned one, and a log-prob passes through the
    MLP's mlp_dim-long sums and the logits'."""
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    atol = fp32_atol(np.abs(b.raw_logprobs).max() + 1.0, config.mlp_dim)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=atol, rtol=0)
    np.testing.assert_allclose(a.raw_logprobs, b.raw_logprobs, atol=atol, rtol=0)


@pytest.mark.parametrize("samples", [1, 3], ids=["dense_view", "shared_prefix"])
def test_flat_and_tree_decodes_equal_the_scanned_ones(tiny, samples):
    config, params = tiny
    unrolled = config.replace(scan_layers=False)
    prompts = prompts_of(0, [5, 17, 9])
    kw = dict(page_size=4, segment_len=8)
    same(generate(unrolled, params, prompts, samples, SP, jax.random.key(1), **kw),
         generate(config, params, prompts, samples, SP, jax.random.key(1), **kw), config)
    if samples == 3:
        tree = TreeConfig(segment_len=8, max_depth=2, leaves_per_prompt=4, first_branching=2,
                          page_size=4, repetition_ngram=0)
        a = tree_generate(unrolled, params, prompts[:2], tree, SP, jax.random.key(2))
        b = tree_generate(config, params, prompts[:2], tree, SP, jax.random.key(2))
        same(a, b, config)
        np.testing.assert_array_equal(a.paths, b.paths)


def test_latr_row_copies_equal_the_scanned_ones(tiny):
    """LATR's branches copy rows within a call (`models.decode_tails.take_rows` on a tail
    split by layer); a final-norm gain of 6 peaks the random model's distributions so the
    authors' thresholds branch some steps (tests/sampling/test_latr.py)."""
    config, params = tiny
    params = dict(params, final_norm=params["final_norm"] * 6.0)
    latr = LatrConfig(width=4, lookahead=(4, 6, 8), prune_distance=0.45, max_steps=16)
    prompts = prompts_of(10, [6, 11, 9], vocab=256)
    kw = dict(page_size=4, segment_len=8)
    a = latr_generate(config.replace(scan_layers=False), params, prompts, 4, SP,
                      jax.random.key(0), latr, **kw)
    b = latr_generate(config, params, prompts, 4, SP, jax.random.key(0), latr, **kw)
    assert b.stats["latr/born"] > 0  # some rows branched and were copied
    same(a, b, config)


def test_an_unrolled_policy_beside_a_scanned_drafter(tiny):
    """The two-model decode of speculative sampling: each model's tails follow its own
    `scan_layers`; greedy tokens are plain decoding's."""
    config, params = tiny
    sp = SamplingParams(temperature=0.0, max_new_tokens=24)
    unrolled = config.replace(scan_layers=False)
    plain = generate(config, params, prompts_of(2, [7, 4]), 1, sp, jax.random.key(1),
                     page_size=4, segment_len=8)
    spec = generate(unrolled, params, prompts_of(2, [7, 4]), 1, sp, jax.random.key(1),
                    page_size=4, segment_len=8, speculative=SpecConfig(draft_len=2, drafter="model"),
                    draft_model=(config, params))
    np.testing.assert_array_equal(spec.tokens, plain.tokens)
    assert spec.stats["spec/accepted"] > 0.9 * spec.stats["spec/proposed"]  # itself


@pytest.mark.slow
def test_unrolled_on_a_mesh_equals_one_device(tiny):
    """Tails split by layer on a 2x2x2 mesh (constrained to the pool's axes after
    `layers`), with groups (page attention) and without (the dense view)."""
    assert jax.device_count() == 8, "conftest must set 8 host devices"
    config, params = tiny
    unrolled = config.replace(scan_layers=False)
    mesh = sharding.make_mesh((2, 2, 2), devices=jax.devices())
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    placed = sharding.shard_params(params, config, mesh, act.rules)
    prompts = prompts_of(0, [5, 9, 3, 12])
    for samples in (4, 1):
        one = generate(config, params, prompts, samples, SP, jax.random.key(1), page_size=4,
                       segment_len=8)
        many = generate(unrolled, placed, prompts, samples, SP, jax.random.key(1),
                        page_size=4, segment_len=8, sharding=act)
        same(many, one, config)


def test_the_decode_follows_scan_layers(tiny, monkeypatch):
    """`scan_layers=False` reaches the decode: the lowered decode program has no layer
    scan left (one `while` fewer: the decode loop's own stays), the scanned one keeps it.
    The equality tests above would pass if the decode ignored the flag."""
    config, params = tiny
    texts, run = [], engine._decode_program
    lower = jax.jit(engine._decode, static_argnums=(0, 7, 8, 9, 10, 11)).lower

    def spy(*args):
        texts.append(lower(*args).as_text())
        return run(*args)

    monkeypatch.setattr(engine, "_decode_program", spy)
    for scan in (True, False):
        generate(config.replace(scan_layers=scan), params, prompts_of(3, [5]), 1, SP,
                 jax.random.key(0), page_size=4, segment_len=8)
    scanned, unrolled = (text.count("stablehlo.while") for text in (texts[0], texts[-1]))
    assert scanned == unrolled + 1
