"""The flat group sampler: log-prob parity, greedy parity, sharing, buckets, pool."""

import tempfile

import jax
import numpy as np
import pytest

import models
from sampling import engine
from sampling.flat import generate
from sampling.page_pool import PagePool, PagePoolError
from sampling.params import SamplingParams
from tests.sampling.test_tree import teacher_forced
from tests.tolerances import fp32_atol


@pytest.fixture(scope="module")
def tiny():
    config = models.get_preset("tiny")
    return config, models.init(config, jax.random.key(0))


def random_prompts(seed, lengths, vocab=512):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, n).tolist() for n in lengths]




@pytest.mark.parametrize("page_size,segment_len", [(4, 8), (16, 64)])
def test_logprobs_match_teacher_forcing(tiny, page_size, segment_len):
    config, params = tiny
    prompts = random_prompts(0, [5, 17, 9])
    sp = SamplingParams(temperature=0.8, top_k=50, max_new_tokens=21,
                        stop_token_ids=tuple(range(7, 20)))
    ro = generate(config, params, prompts, 3, sp, jax.random.key(1), page_size=page_size,
                  segment_len=segment_len)
    assert len(ro) == 9 and list(ro.prompt_index) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    refs = teacher_forced(config, params, [prompts[i] for i in ro.prompt_index],
                          [ro.completion(r) for r in range(len(ro))])
    for r, ref in enumerate(refs):
        completion = ro.completion(r)
        assert 1 <= len(completion) <= 21
        # paged decode vs one full forward: other summation orders; longest sum: mlp_dim
        np.testing.assert_allclose(ro.raw_logprobs[r, :len(completion)], ref,
                                   atol=fp32_atol(ref, config.mlp_dim), rtol=0)
        # the sampling distribution (temperature 0.8, top-k 50) differs from raw
        assert np.all(ro.logprobs[r, :len(completion)] <= 0.0)
        if ro.finish_reason[r] == "stop":
            assert completion[-1] in sp.stop_token_ids
            assert not set(completion[:-1]) & set(sp.stop_token_ids)
        else:
            assert ro.finish_reason[r] == "length" and len(completion) == 21
        assert np.all(ro.logprobs[r, len(completion):] == 0.0)


def test_greedy_matches_transformers_generate(tiny):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config, params = tiny
    prompts = np.random.default_rng(3).integers(0, 512, (4, 12))
    ro = generate(config, params, prompts.tolist(), 1,
                  SamplingParams(temperature=0.0, max_new_tokens=40), jax.random.key(0))
    # Exact equality with another implementation needs clear argmaxes: at every step
    # the top two logits are >= 1e-3 apart (min measured 6.6e-3), 10x the 1e-4 the
    # parity tests allow between the two, so no CPU's rounding can swap them.
    logits = models.apply(config, params, np.concatenate([prompts, ro.tokens], 1))
    top2 = np.sort(np.asarray(logits)[:, 11:-1], -1)[..., -2:]
    assert np.min(top2[..., 1] - top2[..., 0]) > 1e-3
    with tempfile.TemporaryDirectory() as tmp:
        models.save_pretrained(tmp, config, params)
        hf = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    with torch.inference_mode():
        ids = torch.tensor(prompts)
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40,
                          min_new_tokens=40, do_sample=False, pad_token_id=0)
    np.testing.assert_array_equal(ro.tokens, out[:, 12:].numpy())
    assert np.all(ro.logprobs == 0.0)  # greedy: the sampled token has probability 1


def test_prompt_prefilled_once_per_group(tiny):
    config, params = tiny
    prompts = random_prompts(1, [7, 30, 12])
    sp = SamplingParams(max_new_tokens=8)
    for n in (1, 4, 16):
        ro = generate(config, params, prompts, n, sp, jax.random.key(n))
        assert ro.stats["prefill_tokens"] == 7 + 30 + 12
        assert len(ro) == 3 * n
    # identical prompts are merged as well
    ro = generate(config, params, [prompts[0], prompts[0]], 2, sp, jax.random.key(0))
    assert ro.stats["prefill_tokens"] == 7
    # the unshared baseline prefills every sample, with the same results
    shared = generate(config, params, prompts, 4, SamplingParams(temperature=0.0,
                                                                 max_new_tokens=8),
                      jax.random.key(0))
    unshared = generate(config, params, prompts, 4, SamplingParams(temperature=0.0,
                                                                   max_new_tokens=8),
                        jax.random.key(0), share_prompts=False)
    assert unshared.stats["prefill_tokens"] == 4 * (7 + 30 + 12)
    np.testing.assert_array_equal(shared.tokens, unshared.tokens)


def test_samples_of_a_group_differ_and_seed_is_reproducible(tiny):
    config, params = tiny
    prompts = random_prompts(2, [10])
    sp = SamplingParams(temperature=1.0, max_new_tokens=16)
    a = generate(config, params, prompts, 8, sp, jax.random.key(5))
    b = generate(config, params, prompts, 8, sp, jax.random.key(5))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert len({tuple(a.completion(r)) for r in range(8)}) > 1


def test_compilations_constant_within_a_bucket(tiny):
    config, params = tiny
    sp = SamplingParams(temperature=1.0, max_new_tokens=16)
    rng = np.random.default_rng(4)
    generate(config, params, random_prompts(0, [20, 20]), 4, sp, jax.random.key(0))
    before = dict(engine.TRACE_COUNTS)
    for step in range(20):
        lengths = rng.integers(17, 33, 2)  # one 32-slot bucket
        generate(config, params, random_prompts(step, lengths), 4, sp, jax.random.key(step))
    assert dict(engine.TRACE_COUNTS) == before


def test_bad_prompts_are_named(tiny):
    config, params = tiny
    sp = SamplingParams(max_new_tokens=4)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        generate(config, params, [[1, 2], []], 1, sp, jax.random.key(0))
    with pytest.raises(ValueError, match=r"prompt 0 has token ids outside \[0, 512\)"):
        generate(config, params, [[1, 600]], 1, sp, jax.random.key(0))
    with pytest.raises(ValueError, match="n must be >= 1"):
        generate(config, params, [[1]], 0, sp, jax.random.key(0))
    with pytest.raises(ValueError, match="multiple of page_size"):
        generate(config, params, [[1]], 1, sp, jax.random.key(0), page_size=16, segment_len=24)


def test_page_pool_refcounts():
    pool = PagePool(6)
    a = pool.alloc(3)
    assert a == [1, 2, 3] and pool.used_pages == 3
    pool.retain(a[:2])
    pool.release(a)
    assert pool.used_pages == 2 and pool.free_pages == 3
    pool.release(a[:2])
    assert pool.used_pages == 0 and pool.free_pages == 5
    with pytest.raises(PagePoolError, match="release of page 1"):
        pool.release([1])
    with pytest.raises(PagePoolError, match="out of KV pages: need 6, 5 free"):
        pool.alloc(6)
    with pytest.raises(PagePoolError, match="retain of page 2"):
        pool.retain([2])


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_other_families_match_teacher_forcing(family):
    """q/k norm (qwen3) and no q/k/v bias (llama) through the fused decode path."""
    config = models.get_preset("tiny").replace(family=family, num_layers=2)
    params = models.init(config, jax.random.key(1))
    prompts = random_prompts(5, [6, 13])
    ro = generate(config, params, prompts, 2, SamplingParams(temperature=1.0, max_new_tokens=12),
                  jax.random.key(2), page_size=4, segment_len=8)
    refs = teacher_forced(config, params, [prompts[i] for i in ro.prompt_index],
                          [ro.completion(r) for r in range(len(ro))])
    for r, ref in enumerate(refs):
        # paged decode vs one full forward: other summation orders; longest sum: mlp_dim
        np.testing.assert_allclose(ro.raw_logprobs[r, :len(ref)], ref,
                                   atol=fp32_atol(ref, config.mlp_dim), rtol=0)


def test_decode_compiles_once_and_repeats_exactly(tiny):
    """A second generate with the same shapes reuses the decode program (no new
    trace) and, being the same program on the same inputs, returns the same bits."""
    config, params = tiny
    prompts, sp = random_prompts(0, [5, 9]), SamplingParams(max_new_tokens=8)

    def run():
        return generate(config, params, prompts, 2, sp, jax.random.key(0), page_size=4,
                        segment_len=8)

    first = run()
    traces = dict(engine.TRACE_COUNTS)
    second = run()
    assert dict(engine.TRACE_COUNTS) == traces
    np.testing.assert_array_equal(second.tokens, first.tokens)
    np.testing.assert_array_equal(second.logprobs, first.logprobs)
    np.testing.assert_array_equal(second.raw_logprobs, first.raw_logprobs)


@pytest.mark.parametrize("tied", [True, False])
def test_output_head_logits_equal_the_model_logits(tiny, tied):
    import dataclasses

    from sampling.kv_cache import head_logits, output_head

    config = dataclasses.replace(tiny[0], tie_embeddings=tied)
    params = models.init(config, jax.random.key(1))
    h = jax.random.normal(jax.random.key(2), (5, config.hidden_size))
    want = models.logits_from_hidden(config, params, h[:, None])[:, 0]
    got = head_logits(output_head(config, params), h)
    assert got.dtype == jax.numpy.float32
    # pre-transposed vs einsum head: one dot of hidden_size terms, maybe in another order
    np.testing.assert_allclose(np.asarray(got), np.asarray(want),
                               atol=fp32_atol(want, config.hidden_size), rtol=0)


# -- early stop (`stop_when`) and per-row budgets: the sampler side of APRIL (rl.train.april) ---------

def _same_rows(got, want, rows, upto=None):
    """Rows `rows` of two Rollouts agree on their first `upto` (default: all) tokens."""
    for r in rows:
        k = int(want.lengths[r]) if upto is None else upto
        np.testing.assert_array_equal(got.tokens[r, :k], want.tokens[r, :k])
        np.testing.assert_array_equal(got.logprobs[r, :k], want.logprobs[r, :k])
        np.testing.assert_array_equal(got.raw_logprobs[r, :k], want.raw_logprobs[r, :k])


@pytest.fixture
def pools(monkeypatch):
    """Every PagePool `generate` creates, to check that none leaks pages."""
    import sampling.flat as flat

    made = []

    class Recorded(PagePool):
        def __init__(self, num_pages):
            super().__init__(num_pages)
            made.append(self)

    monkeypatch.setattr(flat, "PagePool", Recorded)
    return made


def test_stop_when_stops_after_a_segment_and_marks_partial_rows(tiny, pools):
    config, params = tiny
    prompts = random_prompts(6, [5, 11, 8])
    # ~10% of the vocabulary stops a row: some rows finish in the first 8 tokens, some not
    sp = SamplingParams(temperature=1.0, max_new_tokens=32, stop_token_ids=tuple(range(0, 512, 9)))
    kw = dict(page_size=4, segment_len=8)
    full = generate(config, params, prompts, 4, sp, jax.random.key(3), **kw)
    seen = []

    def stop_now(done):
        seen.append(done)
        return True

    ro = generate(config, params, prompts, 4, sp, jax.random.key(3), stop_when=stop_now, **kw)
    assert len(seen) == 1 and seen[0].shape == (12,) and seen[0].dtype == bool
    first = (full.finish_reason == "stop") & (full.lengths <= 8)  # done in segment 0
    np.testing.assert_array_equal(seen[0], first)
    assert 0 < first.sum() < 12  # the seed gives both kinds
    np.testing.assert_array_equal(ro.finish_reason, np.where(first, "stop", "partial"))
    np.testing.assert_array_equal(ro.lengths, np.where(first, full.lengths, 8))
    _same_rows(ro, full, np.flatnonzero(first))
    _same_rows(ro, full, np.flatnonzero(~first), upto=8)  # the partial rows' prefix
    assert np.all(ro.tokens[~first, 8:] == (config.pad_token_id or 0))
    assert np.all(ro.logprobs[~first, 8:] == 0.0)
    assert ro.stats["stopped_early"] == 1 and ro.stats["partial_rows"] == int((~first).sum())
    assert ro.stats["decode_calls"] == 1
    assert full.stats["stopped_early"] == 0 and full.stats["partial_rows"] == 0
    assert len(pools) == 2 and all(pool.used_pages == 0 for pool in pools)  # no leak


def test_stop_when_that_never_fires_changes_nothing(tiny):
    config, params = tiny
    prompts = random_prompts(7, [5, 9])
    sp = SamplingParams(temperature=1.0, max_new_tokens=20, stop_token_ids=tuple(range(0, 512, 9)))
    kw = dict(page_size=4, segment_len=8)
    base = generate(config, params, prompts, 3, sp, jax.random.key(0), **kw)
    calls = []
    never = generate(config, params, prompts, 3, sp, jax.random.key(0),
                     stop_when=lambda done: calls.append(done.copy()) or False, **kw)
    full_budget = generate(config, params, prompts, 3, sp, jax.random.key(0),
                           max_new_tokens_per_row=np.full(6, 20), **kw)
    assert calls and all(c.shape == (6,) for c in calls)
    for other in (never, full_budget):
        for field in ("tokens", "lengths", "logprobs", "raw_logprobs", "prompt_index",
                      "finish_reason"):
            np.testing.assert_array_equal(getattr(other, field), getattr(base, field))
        assert other.stats == base.stats


def test_stop_when_with_the_april_rule(tiny, pools):
    """`rl.train.april.stop_rule`: stops once `target` groups have all rows done."""
    from rl.train import april

    config, params = tiny
    prompts = random_prompts(8, [6, 7, 9, 12])
    sp = SamplingParams(temperature=1.0, max_new_tokens=48, stop_token_ids=tuple(range(0, 512, 7)))
    kw = dict(page_size=4, segment_len=8)
    full = generate(config, params, prompts, 2, sp, jax.random.key(1), **kw)
    ro = generate(config, params, prompts, 2, sp, jax.random.key(1),
                  stop_when=april.stop_rule(2, 2), **kw)
    done = ro.finish_reason != "partial"
    assert done.reshape(4, 2).all(axis=1).sum() >= 2  # the target reached ...
    if ro.stats["stopped_early"]:  # ... at the first segment boundary it was
        stop = int(ro.lengths[~done].max())
        assert stop % 8 == 0 and np.all(ro.lengths[~done] == stop)
        before = (full.finish_reason == "stop") & (full.lengths <= stop - 8)
        assert before.reshape(4, 2).all(axis=1).sum() < 2
    _same_rows(ro, full, np.flatnonzero(done))
    assert all(pool.used_pages == 0 for pool in pools)


def test_per_row_budgets_cut_the_unlimited_sample(tiny):
    config, params = tiny
    prompts = random_prompts(9, [5, 13])
    sp = SamplingParams(temperature=1.0, max_new_tokens=24, stop_token_ids=tuple(range(0, 512, 31)))
    kw = dict(page_size=4, segment_len=8)
    full = generate(config, params, prompts, 3, sp, jax.random.key(4), **kw)
    budgets = np.array([1, 5, 8, 13, 24, 17])
    ro = generate(config, params, prompts, 3, sp, jax.random.key(4),
                  max_new_tokens_per_row=budgets, **kw)
    assert np.all(ro.lengths <= budgets)
    for r, b in enumerate(budgets):
        if full.finish_reason[r] == "stop" and full.lengths[r] <= b:  # stopped within budget
            assert ro.finish_reason[r] == "stop" and ro.lengths[r] == full.lengths[r]
        else:  # the prefix property: the first b tokens of the unlimited sample
            assert ro.finish_reason[r] == "length" and ro.lengths[r] == b
        _same_rows(ro, full, [r], upto=int(ro.lengths[r]))
        assert np.all(ro.logprobs[r, ro.lengths[r]:] == 0.0)
        assert np.all(ro.tokens[r, ro.lengths[r]:] == (config.pad_token_id or 0))
    assert ro.stats["cut_tokens"] >= 0 and ro.stats["partial_rows"] == 0
    # budgets all below 17: the last segment is never run
    small = generate(config, params, prompts, 3, sp, jax.random.key(4),
                     max_new_tokens_per_row=np.minimum(budgets, 16), **kw)
    assert small.stats["decode_calls"] <= 2 and np.all(small.lengths <= 16)


def test_budgets_and_stop_when_together(tiny, pools):
    """A resumed row (small budget) finishes "length" while a long one is "partial"."""
    config, params = tiny
    prompts = random_prompts(10, [4, 9])
    sp = SamplingParams(temperature=1.0, max_new_tokens=32)
    kw = dict(page_size=4, segment_len=8)
    ro = generate(config, params, prompts, 2, sp, jax.random.key(2),
                  max_new_tokens_per_row=np.array([3, 32, 8, 32]),
                  stop_when=lambda done: bool(done.sum() >= 2), **kw)
    eos = set(config.eos_token_ids)
    for r, (want, length) in enumerate([("length", 3), ("partial", 8), ("length", 8),
                                        ("partial", 8)]):
        if not set(ro.tokens[r, :ro.lengths[r]].tolist()) & eos:
            assert ro.finish_reason[r] == want and ro.lengths[r] == length
    assert all(pool.used_pages == 0 for pool in pools)


def test_bad_budgets_are_named(tiny):
    config, params = tiny
    sp = SamplingParams(max_new_tokens=8)
    for bad in ([1, 2, 3], [0, 1], [1, 9], [1.0, 2.0]):
        with pytest.raises(ValueError, match=r"max_new_tokens_per_row must be 2 ints in \[1, 8\]"):
            generate(config, params, [[1], [2]], 1, sp, jax.random.key(0),
                     max_new_tokens_per_row=np.array(bad))
