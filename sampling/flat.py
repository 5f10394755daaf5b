"""The flat group sampler: n samples per prompt sharing the prompt's pages.

    rollouts = sampling.generate(config, params, prompts, n=8,
                                 sampling_params=SamplingParams(temperature=1.0,
                                                                max_new_tokens=256),
                                 rng=jax.random.key(0))

Each distinct prompt is prefilled once (identical prompts are merged) into
pages that its samples share by reference; every sample gets private pages
for its completion, so no KV data is ever copied. Then one jitted
`while_loop` decodes all samples until each hits a stop token (the model's
eos ids plus `stop_token_ids`) or `max_new_tokens`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from models.config import ModelConfig
from sampling import engine
from sampling.kv_cache import cache_bytes
from sampling.page_pool import NULL_PAGE, PagePool
from sampling.params import SamplingParams
from sampling.rollouts import Rollouts

DEFAULT_PAGE_SIZE = 16
DEFAULT_SEGMENT_LEN = 64


def generate(config: ModelConfig, params: dict, prompts, n: int,
             sampling_params: SamplingParams, rng: jax.Array, *,
             page_size: int = DEFAULT_PAGE_SIZE,
             segment_len: int = DEFAULT_SEGMENT_LEN, share_prompts: bool = True) -> Rollouts:
    """`n` completions of each prompt (token id lists).

    Returns Rollouts with rows ordered prompt-major (row = prompt * n + j) and
    `stats`: prefill_tokens (prompt tokens actually run: each distinct prompt
    once), prefill_slots (including bucket padding), decode_tokens
    (generated tokens), decode_steps, decode_row_steps (steps × bucketed
    rows, the work done) and kv_pages. `share_prompts=False` prefills every
    sample's own copy of its prompt (the baseline the sharing is measured
    against).
    """
    sp = sampling_params
    stop_ids = engine.stop_token_ids(config, sp)

    def prefill(num_pages, layout, rows):
        return engine.prefill_layout(config, params, num_pages, layout, rows)

    def decode(cache, state, seg, limit, steps):
        return engine.decode(config, params, cache, state, rng, seg, limit, sp, steps, stop_ids)

    rollouts, _ = run_groups((config,), prompts, n, sp, prefill, decode, page_size=page_size,
                             segment_len=segment_len, share_prompts=share_prompts)
    return rollouts


def run_groups(configs: tuple[ModelConfig, ...], prompts, n: int, sp: SamplingParams,
               prefill: Callable, decode: Callable, *, page_size: int, segment_len: int,
               share_prompts: bool = True) -> tuple[Rollouts, dict]:
    """The host side of `generate` for one or more models decoding side by side.

    `prefill(num_pages, layout, rows) -> (hidden, carry)` fills the models'
    caches from one `engine.PromptLayout` (so they share page tables); then
    each segment calls `decode(carry, state, seg, limit, steps) -> (out,
    hidden, carry)` (`carry`, e.g. the caches, is opaque here). Returns the
    Rollouts and `out.extra` of the segments joined, trimmed to [R, max_new_tokens].
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if page_size < 1 or segment_len < 1 or segment_len % page_size:
        raise ValueError(f"segment_len ({segment_len}) must be a positive multiple of "
                         f"page_size ({page_size})")
    config = configs[0]
    prompts = engine.check_prompts(config, prompts)
    if share_prompts:
        distinct: dict[tuple[int, ...], int] = {}
        which = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
        unique = [list(p) for p in distinct]
        sample_source = np.repeat(which, n)
    else:  # one prefill row per sample
        unique = [p for p in prompts for _ in range(n)]
        sample_source = np.arange(len(unique))

    b = len(unique)
    rows_b = engine.next_pow2(b)
    prompt_pages = engine.prompt_bucket(max(map(len, unique)), page_size) // page_size
    segment_len = min(segment_len, page_size * -(-sp.max_new_tokens // page_size))
    gen_pages = -(-sp.max_new_tokens // segment_len) * (segment_len // page_size)
    r = len(prompts) * n
    rows = engine.next_pow2(r)
    pool = PagePool(1 + rows_b * prompt_pages + rows * gen_pages)

    source = np.zeros(rows, np.int32)  # distinct prompt of each row
    source[:r] = sample_source
    layout = engine.layout_prompts(pool, unique, page_size, config.pad_token_id or 0)
    hidden, carry = prefill(pool.num_pages, layout, source)
    prompt_tables, offsets, slots = layout.tables, layout.offsets, layout.slots

    real = np.arange(rows) < r
    for row in range(r):
        pool.retain(prompt_tables[source[row]])
    pool.release(prompt_tables[:b].ravel())  # the samples now hold the prompt pages

    # Decode in segments: each call attends over the pages written so far
    # (prompt + earlier segments) instead of the whole max length.
    tables = prompt_tables[source]
    offsets, positions = offsets[source], slots - offsets[source]
    done = ~real
    outputs = []
    seg_pages = segment_len // page_size
    for seg in range(-(-sp.max_new_tokens // segment_len)):
        fresh = np.full((rows, seg_pages), NULL_PAGE, np.int32)
        for row in np.flatnonzero(~done):
            fresh[row] = pool.alloc(seg_pages)
        state = engine.RowState(hidden=hidden, prefix_tables=tables, segment_tables=fresh,
                                offsets=offsets, positions=positions, done=done)
        out, hidden, carry = decode(carry, state, seg,
                                    np.int32(sp.max_new_tokens - seg * segment_len), segment_len)
        out = engine.as_numpy(out)
        outputs.append(out)
        tables = np.concatenate([tables, fresh], axis=1)
        positions = positions + segment_len
        done = done | (out.finish == engine.STOP)
        if done.all():
            break
    for row in range(r):
        pool.release(tables[row])
    if pool.used_pages:
        raise RuntimeError(f"KV page leak: {pool.used_pages} pages still in use")

    out = engine.concat_outputs(outputs)
    finish = np.where(out.finish[:r] == engine.STOP, "stop", "length")
    width = sp.max_new_tokens
    rollouts = Rollouts(
        tokens=out.tokens[:r, :width], lengths=out.num_tokens[:r],
        logprobs=out.logprobs[:r, :width], raw_logprobs=out.raw_logprobs[:r, :width],
        prompt_index=np.repeat(np.arange(len(prompts), dtype=np.int32), n),
        finish_reason=finish,
        stats={"prefill_tokens": int(sum(map(len, unique))), "prefill_slots": rows_b * slots,
               "decode_tokens": int(out.num_tokens[:r].sum()), "decode_steps": int(out.steps),
               "decode_row_steps": int(out.steps) * rows, "decode_calls": len(outputs),
               "kv_pages": pool.num_pages,
               "kv_bytes": sum(cache_bytes(c, pool.num_pages, page_size) for c in configs)})
    return rollouts, {k: v[:r, :width] for k, v in out.extra.items()}
