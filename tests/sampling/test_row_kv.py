"""Kept caches (`sampling.row_kv`, `generate(keep_partial=..., resume=...)`): a row stopped
between segments and continued from its kept pages goes on as if it had never stopped;
with other weights it attends to the old pages (unlike a recompute); on a mesh the pages
come from and go to the row's own shard."""

import jax
import numpy as np
import pytest

import models
from models import sharding
from sampling import SamplingParams, generate
from tests.tolerances import fp32_atol

KW = dict(page_size=4, segment_len=4)


@pytest.fixture(scope="module")
def tiny():
    config = models.get_preset("tiny").replace(num_layers=2)
    return config, models.init(config, jax.random.key(0))


def prompts_of(config, seed=0, lengths=(5, 9, 7, 12)):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, config.vocab_size, n).tolist() for n in lengths]


def stop_after_first_segment(done):
    return True


def continue_rows(config, params, prompts, first, sp, rng, *, keep, sharding=None):
    """The partial rows of `first` continued: from their kept caches (`keep`) or prefilled
    again, each with the tokens it has left."""
    rows = np.flatnonzero(first.finish_reason == "partial")
    ps = [prompts[r] + first.tokens[r, :first.lengths[r]].tolist() for r in rows]
    budgets = np.array([sp.max_new_tokens - first.lengths[r] for r in rows])
    resume = {i: first.kv[r] for i, r in enumerate(rows)} if keep else None
    return rows, generate(config, params, ps, 1, sp, rng, max_new_tokens_per_row=budgets,
                          resume=resume, sharding=sharding, **KW)


def test_a_kept_row_goes_on_as_if_it_had_never_stopped(tiny):
    config, params = tiny
    prompts = prompts_of(config)
    # greedy: the continuation is a function of the cache and hidden state alone
    sp = SamplingParams(temperature=0.0, max_new_tokens=16, stop_token_ids=(5, 6, 7))
    full = generate(config, params, prompts, 1, sp, jax.random.key(1), **KW)
    first = generate(config, params, prompts, 1, sp, jax.random.key(1),
                     stop_when=stop_after_first_segment, keep_partial=True, **KW)
    assert {str(f) for f in first.finish_reason} == {"partial"}
    assert all(len(kv) == len(p) + 4 for kv, p in zip(first.kv, prompts, strict=True))
    rows, rest = continue_rows(config, params, prompts, first, sp, jax.random.key(2),
                               keep=True)
    for i, r in enumerate(rows):
        tokens = first.tokens[r, :4].tolist() + rest.tokens[i, :rest.lengths[i]].tolist()
        assert tokens == full.tokens[r, :full.lengths[r]].tolist(), r
        # the same sums as the uninterrupted decode over pages laid out otherwise
        atol = fp32_atol(np.abs(full.raw_logprobs).max() + 1.0, config.mlp_dim)
        np.testing.assert_allclose(rest.raw_logprobs[i, :rest.lengths[i]],
                                   full.raw_logprobs[r, 4:full.lengths[r]], atol=atol, rtol=0)


def test_with_new_weights_a_kept_row_attends_to_the_old_pages(tiny):
    config, params = tiny
    prompts = prompts_of(config, seed=1)
    sp = SamplingParams(temperature=1.0, max_new_tokens=12)
    first = generate(config, params, prompts, 1, sp, jax.random.key(3),
                     stop_when=stop_after_first_segment, keep_partial=True, **KW)
    newer = jax.tree.map(lambda x: x * 1.05, params)
    _, kept = continue_rows(config, newer, prompts, first, sp, jax.random.key(4), keep=True)
    _, redone = continue_rows(config, newer, prompts, first, sp, jax.random.key(4), keep=False)
    same_params_kept = continue_rows(config, params, prompts, first, sp, jax.random.key(4),
                                     keep=True)[1]
    # the same draws (same key) under the new weights: the first token comes from the old
    # hidden state, the rest attend to old keys and values, so the log-probs differ from
    # a recompute's, and from the old weights' too
    assert np.abs(kept.raw_logprobs[:, 0] - redone.raw_logprobs[:, 0]).max() > 1e-3
    assert np.abs(kept.raw_logprobs[:, 0] - same_params_kept.raw_logprobs[:, 0]).max() > 1e-3


@pytest.mark.slow
def test_kept_caches_on_a_mesh_equal_one_device(tiny):
    config, params = tiny
    prompts = prompts_of(config, seed=2, lengths=(5, 9, 7, 12, 3, 8, 6, 10))
    sp = SamplingParams(temperature=1.0, max_new_tokens=12)
    mesh = sharding.make_mesh((2, 2, 2))
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    placed = sharding.shard_params(params, config, mesh, act.rules)
    one = generate(config, params, prompts, 1, sp, jax.random.key(5),
                   stop_when=stop_after_first_segment, keep_partial=True, **KW)
    many = generate(config, placed, prompts, 1, sp, jax.random.key(5),
                    stop_when=stop_after_first_segment, keep_partial=True, sharding=act, **KW)
    atol = fp32_atol(1.0, config.mlp_dim)  # keys and values: O(1), sharded sums
    for a, b in zip(one.kv, many.kv, strict=True):
        np.testing.assert_allclose(b.k, a.k, atol=atol, rtol=0)
        np.testing.assert_allclose(b.v, a.v, atol=atol, rtol=0)
    _, rest_one = continue_rows(config, params, prompts, one, sp, jax.random.key(6), keep=True)
    _, rest_many = continue_rows(config, placed, prompts, many, sp, jax.random.key(6),
                                 keep=True, sharding=act)
    np.testing.assert_array_equal(rest_many.tokens, rest_one.tokens)
