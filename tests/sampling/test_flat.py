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
        np.testing.assert_allclose(ro.raw_logprobs[r, :len(completion)], ref, atol=1e-4)
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
        np.testing.assert_allclose(ro.raw_logprobs[r, :len(ref)], ref, atol=1e-4)


def test_cpu_decode_options_keep_dots_out_of_ynnpack():
    """`engine.CPU_DECODE_OPTIONS` is a real XLA:CPU option (an unknown one fails
    to compile) that moves dots off YNNPACK; the default routes them there."""
    x, w = jax.numpy.ones((16, 256)), jax.numpy.ones((256, 512))

    def hlo(options):
        return jax.jit(lambda a, b: a @ b, compiler_options=options).lower(x, w).compile().as_text()

    assert "__ynn_fusion" in hlo(None)
    assert "__ynn_fusion" not in hlo(engine.CPU_DECODE_OPTIONS)


def test_decode_is_compiled_once_per_backend_with_its_options(tiny):
    config, params = tiny
    generate(config, params, random_prompts(0, [5, 9]), 2, SamplingParams(max_new_tokens=8),
             jax.random.key(0), page_size=4, segment_len=8)
    assert set(engine._decode_programs) == {jax.default_backend()}
    assert engine.decode_options("cpu") == engine.CPU_DECODE_OPTIONS
    assert engine.decode_options("gpu") is None


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
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
