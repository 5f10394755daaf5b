"""Several LoRA adapters over one base in one sampler batch (`sampling.generate(...,
arms=)`, `models.lora.stack`/`select`): each arm's samples are those of a call of its
own, and identical prompts of two arms keep their own pages."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
import sampling
from models import lora

CONFIG = dataclasses.replace(models.get_preset("tiny"), num_layers=2, vocab_size=96,
                             hidden_size=64, mlp_dim=128, num_heads=2, num_kv_heads=1,
                             head_dim=32)
LORA = lora.LoraConfig(rank=4, alpha=8.0, targets=("q", "v", "o", "up", "down"))
PARAMS = models.init(CONFIG, jax.random.key(0))
ADAPTERS = [jax.tree.map(lambda x, i=i: x + 0.05 * jax.random.normal(jax.random.key(i), x.shape),
                         lora.init(CONFIG, LORA, jax.random.key(10 + i))) for i in range(3)]
STACKED = lora.attach(PARAMS, lora.stack(ADAPTERS), LORA)


def test_each_row_runs_its_own_adapter():
    tokens = jax.random.randint(jax.random.key(3), (5, 9), 0, CONFIG.vocab_size)
    arms = jnp.array([2, 0, 1, 2, 0])
    out = jax.jit(models.apply, static_argnums=0)(CONFIG, lora.select(STACKED, arms), tokens)
    for i, arm in enumerate(np.asarray(arms)):
        alone = models.apply(CONFIG, lora.attach(PARAMS, ADAPTERS[arm], LORA), tokens[i:i + 1])
        # fp32 sums of another batch shape and a per-row gather: logits of O(1-10)
        np.testing.assert_allclose(np.asarray(out[i]), np.asarray(alone[0]), atol=5e-5)
    with pytest.raises(ValueError, match="no dense form"):
        lora.dense(lora.select(STACKED, arms)["layers"]["q"], jnp.float32)


def test_arms_in_one_batch_sample_what_each_samples_alone():
    rng = np.random.RandomState(0)
    prompts = [list(rng.randint(1, CONFIG.vocab_size, rng.randint(3, 12))) for _ in range(3)]
    sp = sampling.SamplingParams(temperature=1.0, max_new_tokens=12)
    key = jax.random.key(4)
    # the same prompts for every arm, as a sweep's arms of one seed see them
    both = sampling.generate(CONFIG, STACKED, prompts * 3, 4, sp, key,
                             arms=np.repeat([0, 1, 2], 3), page_size=4, segment_len=8)
    rows = len(prompts) * 4
    for arm in range(3):
        alone = sampling.generate(CONFIG, lora.attach(PARAMS, ADAPTERS[arm], LORA), prompts, 4,
                                  sp, key, page_size=4, segment_len=8)
        part = slice(arm * rows, (arm + 1) * rows)
        np.testing.assert_array_equal(np.asarray(both.tokens)[part], np.asarray(alone.tokens))
        # the same tokens; log-probs within fp32 rounding of a larger batch (measured
        # ~5e-6 on log-probs of magnitude up to ~10, as for one adapter in a larger batch)
        np.testing.assert_allclose(np.asarray(both.logprobs)[part], np.asarray(alone.logprobs),
                                   atol=1e-4)
    tokens = np.asarray(both.tokens)
    assert (tokens[:rows] != tokens[rows:2 * rows]).mean() > 0.5  # the adapters differ
    # identical prompts of different arms are prefilled apart (their K/V differ)
    assert both.stats["prefill_tokens"] == 3 * sum(map(len, prompts))


def test_arms_with_keys_of_their_own_sample_what_each_samples_alone():
    """A sweep's arms draw from keys of their own (their seeds and sampling rounds
    differ): rng [K] gives arm k key k."""
    rng = np.random.RandomState(1)
    prompts = [list(rng.randint(1, CONFIG.vocab_size, rng.randint(3, 12))) for _ in range(5)]
    sp = sampling.SamplingParams(temperature=1.0, max_new_tokens=10)
    keys = jax.random.split(jax.random.key(7), 3)
    arms = np.array([1, 0, 2, 0, 1])  # interleaved, as the arms' calls come in
    both = sampling.generate(CONFIG, STACKED, prompts, 3, sp, keys, arms=arms, page_size=4,
                             segment_len=4)
    for arm in range(3):
        mine = np.flatnonzero(arms == arm)
        alone = sampling.generate(CONFIG, lora.attach(PARAMS, ADAPTERS[arm], LORA),
                                  [prompts[i] for i in mine], 3, sp, keys[arm], page_size=4,
                                  segment_len=4)
        part = np.concatenate([np.arange(3 * i, 3 * i + 3) for i in mine])
        np.testing.assert_array_equal(np.asarray(both.tokens)[part], np.asarray(alone.tokens))
        # as above: fp32 rounding of a larger batch
        np.testing.assert_allclose(np.asarray(both.logprobs)[part],
                                   np.asarray(alone.logprobs), atol=1e-4)
    # one key for every arm draws other tokens: the keys are used
    shared = sampling.generate(CONFIG, STACKED, prompts, 3, sp, keys[0], arms=arms,
                               page_size=4, segment_len=4)
    assert (np.asarray(shared.tokens) != np.asarray(both.tokens)).any()
    with pytest.raises(ValueError, match="one key per adapter"):
        sampling.generate(CONFIG, STACKED, prompts, 3, sp, keys[:2], arms=arms)
    # a raw uint32 key [2] is one key, not two: it samples as its typed twin does
    raw = sampling.generate(CONFIG, STACKED, prompts, 3, sp, jax.random.key_data(keys[0]),
                            arms=arms, page_size=4, segment_len=4)
    np.testing.assert_array_equal(np.asarray(raw.tokens), np.asarray(shared.tokens))


def test_bad_arms_fail_with_one_line():
    sp = sampling.SamplingParams(temperature=1.0, max_new_tokens=4)
    with pytest.raises(ValueError, match="arms must be \\[2\\] ints >= 0"):
        sampling.generate(CONFIG, STACKED, [[1, 2], [3]], 2, sp, jax.random.key(0),
                          arms=np.array([0]))


def test_rows_in_equal_blocks_take_one_batched_product(monkeypatch):
    """Every arm the same number of rows, in arm order (a sweep's arms asking alike):
    `select` marks the blocks, and `models.linear` runs them as one batched product."""
    from models import linear  # noqa: PLC0415

    blocks = np.repeat([0, 1, 2], 2)
    assert lora.select(STACKED, blocks)["layers"]["q"].blocks == 3
    assert lora.select(STACKED, np.array([0, 1, 2, 0, 1, 2]))["layers"]["q"].blocks == 0
    assert lora.select(STACKED, jnp.asarray(blocks))["layers"]["q"].blocks == 0  # traced
    tokens = jax.random.randint(jax.random.key(5), (6, 7), 0, CONFIG.vocab_size)
    apply = jax.jit(models.apply, static_argnums=0)
    by_block = apply(CONFIG, lora.select(STACKED, blocks), tokens)
    by_row = apply(CONFIG, lora.select(STACKED, jnp.asarray(blocks)), tokens)
    # the same products summed in another batch shape: logits of O(1-10)
    np.testing.assert_allclose(np.asarray(by_block), np.asarray(by_row), atol=5e-5)
    traced = []
    monkeypatch.setattr(linear, "_per_block",
                        lambda *a, f=linear._per_block: traced.append(1) or f(*a))
    rng = np.random.RandomState(2)
    prompts = [list(rng.randint(1, CONFIG.vocab_size, rng.randint(3, 12))) for _ in range(2)]
    sp = sampling.SamplingParams(temperature=1.0, max_new_tokens=9)
    keys = jax.random.split(jax.random.key(8), 3)
    # 3 arms x 2 prompts x 4 samples = 24 decode rows: a row bucket of its own, no padding
    both = sampling.generate(CONFIG, STACKED, prompts * 3, 4, sp, keys,
                             arms=np.repeat([0, 1, 2], 2), page_size=4, segment_len=4)
    assert traced, "the decode did not take the batched product"
    for arm in range(3):
        alone = sampling.generate(CONFIG, lora.attach(PARAMS, ADAPTERS[arm], LORA), prompts, 4,
                                  sp, keys[arm], page_size=4, segment_len=4)
        np.testing.assert_array_equal(np.asarray(both.tokens)[arm * 8:(arm + 1) * 8],
                                      np.asarray(alone.tokens))
