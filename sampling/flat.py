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

Two options serve partial rollouts (APRIL, `rl.train.april`): `stop_when(done)` is
asked after every decode segment whether to stop early (the unfinished rows
are returned with finish reason "partial"), and `max_new_tokens_per_row`
gives each row its own token budget (a resumed partial row has only what its
first part left). Budgets are kept on the host: a row whose budget is spent at
a segment boundary stops decoding there, the last segment runs only as many
steps as the largest remaining budget needs, and a row that overshot its budget
inside a segment is cut back to it. Step i of every row draws with the same key
whatever the budgets, so the cut row is exactly the first `budget` tokens of the
row sampled without a budget (autoregressive sampling: a valid sample of the
shorter budget).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from models.config import ModelConfig
from models.sharding import ActivationSharding
from sampling import arms as arms_lib
from sampling import engine, row_kv, spec_calls
from sampling import shards as shards_lib
from sampling.kv_cache import cache_bytes
from sampling.page_pool import NULL_PAGE, PagePool
from sampling.params import SamplingParams
from sampling.rollouts import Rollouts
from sampling.spec_decode import SpecConfig

DEFAULT_PAGE_SIZE = 16
DEFAULT_SEGMENT_LEN = 64


def generate(config: ModelConfig, params: dict, prompts, n: int,
             sampling_params: SamplingParams, rng: jax.Array, *,
             page_size: int = DEFAULT_PAGE_SIZE,
             segment_len: int = DEFAULT_SEGMENT_LEN, share_prompts: bool = True,
             stop_when: Callable[[np.ndarray], bool] | None = None,
             max_new_tokens_per_row: np.ndarray | None = None,
             attention: str = "shared_prefix",
             sharding: ActivationSharding | None = None, resume: dict | None = None,
             keep_partial: bool = False, arms: np.ndarray | None = None,
             speculative: SpecConfig | None = None,
             draft_model: tuple[ModelConfig, dict] | None = None) -> Rollouts:
    """`n` completions of each prompt (token id lists).

    Returns Rollouts with rows ordered prompt-major (row = prompt * n + j) and
    `stats`: prefill_tokens (prompt tokens actually run: each distinct prompt
    once), prefill_slots (including bucket padding), decode_tokens
    (generated tokens), decode_steps, decode_row_steps (steps × bucketed
    rows, the work done) and kv_pages. `share_prompts=False` prefills every
    sample's own copy of its prompt (the baseline the sharing is measured
    against). `stop_when` and `max_new_tokens_per_row`: see `run_groups`.
    `attention`: "shared_prefix" (page attention) or "dense_view" (the
    per-row copies it replaced; `engine.decode`). `sharding`: the learner's
    mesh and rules (`models.sharding.ActivationSharding`); `params` are used
    as they are placed: prompt groups, their rows and their KV pages split over
    the batch axes (`sampling.shards`), heads over `tensor`. `keep_partial`: the rows
    that `stop_when` leaves unfinished return their caches (`Rollouts.kv`,
    `sampling.row_kv.RowKV`); `resume` {prompt index: RowKV} (n = 1) continues such a
    row from its kept cache (the prompt: its original prompt and tokens so far) instead
    of prefilling it. `arms` [len(prompts)]: `params` hold several LoRA adapters
    (`models.lora.stack`) and prompt i's samples run adapter `arms[i]`, all in one batch;
    the samples of an arm draw the random numbers they would draw in a call of their
    own (their index among the arm's samples), and identical prompts of two arms do not
    share pages. With `arms`, `rng` may be keys [K], arm k drawing from key k, so every
    arm samples exactly what a call of its own with its key samples. `speculative`
    (`sampling.spec_decode.SpecConfig`): decode calls with few enough running rows
    draft and verify several tokens per forward (no arms or kept caches);
    stats add its counts (`spec/*`). `draft_model` (config, params): the drafter of
    `SpecConfig(drafter="model")`, with the policy's vocabulary (`sampling.spec_model`).
    """
    sp = sampling_params
    keyed = arms_lib.keyed(rng, arms)
    stop_ids = engine.stop_token_ids(config, sp)

    def prefill(num_pages, layout, rows, arms=None):
        return engine.prefill_layout(config, arms_lib.rows_of(params, arms), num_pages,
                                     layout, rows, sharding)

    def decode(cache, state, seg, limit, steps, arms=None):
        return engine.decode(config, arms_lib.rows_of(params, arms), cache, state, rng, seg,
                             limit, sp, steps, stop_ids, attention, sharding)

    if speculative is not None:
        prefill, decode, configs = spec_calls.wire(
            config, params, prompts, n, sp, speculative, draft_model,
            (config, params, rng, stop_ids, sharding), prefill, decode,
            arms is not None or resume or keep_partial)
    elif draft_model is not None:
        raise ValueError("draft_model is given but speculative decoding is off")
    else:
        configs = (config,)
    keep = None
    if resume or keep_partial:
        keep = (row_kv.put, lambda carry, hidden, where: (
            row_kv.take(carry, hidden, where, engine.as_numpy) if keep_partial else None))
    rollouts, _ = run_groups(configs, prompts, n, sp, prefill, decode, page_size=page_size,
                             segment_len=segment_len, share_prompts=share_prompts,
                             stop_when=stop_when, max_new_tokens_per_row=max_new_tokens_per_row,
                             shards=shards_lib.of(sharding).count, resume=resume, keep=keep,
                             arms=arms, keyed=keyed)
    if speculative is not None:
        rollouts.stats.update(decode.stats)
    return rollouts


def run_groups(configs: tuple[ModelConfig, ...], prompts, n: int, sp: SamplingParams,
               prefill: Callable, decode: Callable, *, page_size: int, segment_len: int,
               share_prompts: bool = True,
               stop_when: Callable[[np.ndarray], bool] | None = None,
               max_new_tokens_per_row: np.ndarray | None = None,
               shards: int = 1, resume: dict | None = None,
               keep: tuple[Callable, Callable] | None = None,
               arms: np.ndarray | None = None, keyed: bool = False
               ) -> tuple[Rollouts, dict]:
    """The host side of `generate` for one or more models decoding side by side.

    `prefill(num_pages, layout, rows) -> (hidden, carry)` fills the models'
    caches from one `engine.PromptLayout` (so they share page tables); then
    each segment calls `decode(carry, state, seg, limit, steps) -> (out,
    hidden, carry)` (`carry`, e.g. the caches, is opaque here). Returns the
    Rollouts and `out.extra` of the segments joined, trimmed to [R, max_new_tokens]
    (fewer columns when every row finished, or decoding stopped, earlier).

    `stop_when(done)`, with `done` [R] bool (rows that hit a stop token or
    their budget), is called after each segment but the last; when it returns
    True decoding stops and the unfinished rows get finish reason "partial"
    (their tokens so far are kept). `max_new_tokens_per_row` [R] ints in
    [1, max_new_tokens] caps each row (finish "length" at its cap unless a stop
    token came first); see the module docstring. Stats add stopped_early (0/1),
    partial_rows and cut_tokens (tokens generated past a budget and dropped).

    `shards` > 1 (the batch shards of the callables' mesh, `sampling.shards`): each
    prompt's group goes to one shard, where its prefill, its rows and all their pages
    live (one page pool per shard, ids local to it); the Rollouts are in sample order.

    `keep` = (put, take) (`sampling.row_kv`): `resume` {prompt: RowKV} (n = 1) puts those
    prompts' kept caches in place of a prefill, and the unfinished rows' caches come back
    as `Rollouts.kv` (take).

    `arms` [len(prompts)] (adapters in one batch, `generate`): the callables get `arms=`;
    `keyed`: their rng is keys [K], one per arm (`sampling.arms.with_arms`).
    """
    check_layout(n, page_size, segment_len)
    config = configs[0]
    prompts = engine.check_prompts(config, prompts)
    resume = _check_resume(resume, n, keep)
    r = len(prompts) * n
    prompt_shard = shards_lib.assign([n] * len(prompts), shards)
    rows = shards_lib.place(np.repeat(prompt_shard, n), shards)
    arms = arms if arms is None else arms_lib.check(arms, len(prompts))
    unique, unique_shard, sample_source = distinct(prompts, n, share_prompts, prompt_shard,
                                                   set(resume), arms)
    segment_len = min(segment_len, page_size * -(-sp.max_new_tokens // page_size))
    gen_pages = -(-sp.max_new_tokens // segment_len) * (segment_len // page_size)
    budget = np.full(rows.rows, sp.max_new_tokens, np.int64)  # padding rows never limit
    budget[rows.place] = _budgets(max_new_tokens_per_row, r, sp.max_new_tokens)
    pools, layout, source = shard_layout(unique, unique_shard, sample_source, rows, page_size,
                                         gen_pages, config.pad_token_id or 0)
    if arms is not None:
        prefill, decode, rows = arms_lib.with_arms(prefill, decode, rows, layout,
                                                   sample_source, np.repeat(arms, n), keyed)
    hidden, carry = _prefill(prefill, keep, pools, layout, source, sample_source, rows,
                             unique_shard, prompts, resume)
    hand_over_prompt_pages(pools, layout, source, rows, unique_shard)
    outputs, own, done, stopped_early, (hidden, carry) = _decode_segments(
        decode, pools, layout, source, hidden, carry, budget, rows, sp.max_new_tokens,
        segment_len, page_size, stop_when)
    kept = None
    if keep is not None:  # the unfinished rows' caches, for a later call
        out_tokens = sum(o.num_tokens for o in outputs)
        kept = keep[1](carry, hidden, _partial_pages(layout, source, own, done, rows,
                                                     out_tokens, pools, page_size))
    for row in rows.place:
        pools[row // rows.per].release(np.concatenate([layout.tables[source[row]], own[row]]))
    if any(p.used_pages for p in pools):
        raise RuntimeError(f"KV page leak: {sum(p.used_pages for p in pools)} pages still in "
                           "use")

    out = engine.concat_outputs(outputs)
    stats = call_stats(configs, unique, layout, out, len(outputs), rows, pools, page_size,
                       stopped_early)
    rollouts, extra = to_rollouts(engine.take_rows(out, rows.place), rows.to_items(budget),
                                  rows.to_items(done), len(prompts), n, sp.max_new_tokens,
                                  np.int32(config.pad_token_id or 0), stats)
    return _with_kept(rollouts, kept), extra


def _with_kept(rollouts: Rollouts, kept: list | None) -> Rollouts:
    """`rollouts` with the partial rows' kept caches (`Rollouts.kv`, in sample order)."""
    if kept is not None:
        rollouts.kv = [None] * len(rollouts)
        for i, row in zip(np.flatnonzero(rollouts.finish_reason == "partial"), kept,
                          strict=True):
            rollouts.kv[i] = row
    return rollouts


def hand_over_prompt_pages(pools: list[PagePool], layout, source: np.ndarray,
                            rows: shards_lib.Placement, unique_shard: np.ndarray) -> None:
    """The samples take a reference to their prompt's pages; the layout drops its own."""
    for row in rows.place:
        pools[row // rows.per].retain(layout.tables[source[row]])
    for i, table in enumerate(layout.tables[layout.rows]):
        pools[unique_shard[i]].release(table)


def _check_resume(resume: dict | None, n: int, keep) -> dict:
    if resume and (n != 1 or keep is None):
        raise ValueError("resumed caches need n=1 and the keep hooks")
    return resume or {}


def call_stats(configs, unique, layout, out, calls: int, rows: shards_lib.Placement,
           pools: list[PagePool], page_size: int, stopped_early: bool) -> dict:
    """The call's work: tokens prefilled and decoded, steps, pages (`generate`)."""
    pages = sum(p.num_pages for p in pools)
    return {"prefill_tokens": int(sum(map(len, unique))),
            "prefill_slots": len(layout.tables) * layout.slots,
            "decode_tokens": int(out.num_tokens.sum()), "decode_steps": int(out.steps),
            "decode_row_steps": int(out.steps) * rows.rows, "decode_calls": calls,
            "kv_pages": pages,
            "kv_bytes": sum(cache_bytes(c, pages, page_size) for c in configs),
            "stopped_early": int(stopped_early)}


def _prefill(prefill: Callable, keep, pools: list[PagePool], layout, source: np.ndarray,
             sample_source: np.ndarray, rows: shards_lib.Placement, unique_shard: np.ndarray,
             prompts, resume: dict):
    """`prefill` of the call's prompts but those with kept caches (`resume`), whose pages
    and hidden states `keep`'s put writes instead; (hidden, carry)."""
    resumed = _resumed_pages(layout, sample_source, rows, unique_shard, pools, prompts, resume)
    prefilled = layout._replace(active=layout.active & ~np.isin(
        np.arange(len(layout.active)), layout.rows[sample_source[sorted(resume)]]))
    hidden, carry = prefill(sum(p.num_pages for p in pools), prefilled, source)
    if resume:
        carry, hidden = keep[0](carry, hidden, resumed, [resume[i] for i in sorted(resume)])
    return hidden, carry


def check_layout(n: int, page_size: int, segment_len: int, prefix: str = "") -> None:
    """The flat sampler's shape rules (ValueError naming the one broken, each name after
    `prefix`); run by the sampler and, on the config's values (`prefix="sampling."`), by
    the trainer's start-up checks."""
    if n < 1:
        raise ValueError(f"{prefix}n must be >= 1, got {n}")
    if page_size < 1 or segment_len < 1 or segment_len % page_size:
        raise ValueError(f"{prefix}segment_len ({segment_len}) must be a positive multiple of "
                         f"{prefix}page_size ({page_size})")


def shard_layout(unique: list[list[int]], unique_shard: np.ndarray, sample_source: np.ndarray,
                 rows: shards_lib.Placement, page_size: int, gen_pages: int, pad_id: int):
    """(pools, layout, source): one page pool per batch shard (`sampling.shards`), sized
    for its prompts' pages and its rows' `gen_pages` each; the distinct prompts laid out
    in them (`unique_shard` [U] the shard of each); `source` [rows.rows] the prompt row of
    each device row (sample i's prompt is `sample_source[i]`; a padding row points at its
    shard's first row)."""
    count = rows.count
    per_prompt = np.bincount(unique_shard, minlength=count).max()
    prompt_pages = engine.prompt_bucket(max(map(len, unique)), page_size) // page_size
    pools = [PagePool(1 + engine.next_pow2(per_prompt) * prompt_pages + rows.per * gen_pages)
             for _ in range(count)]
    layout = engine.layout_prompts(pools, unique, page_size, pad_id, unique_shard)
    source = np.arange(rows.rows) // rows.per * (len(layout.tables) // count)
    source[rows.place] = layout.rows[sample_source]
    return pools, layout, source


def distinct(prompts: list[list[int]], n: int, share: bool, prompt_shard: np.ndarray,
              apart: set[int] = frozenset(),
              arms: np.ndarray | None = None) -> tuple[list, np.ndarray, np.ndarray]:
    """(the prompts to prefill, the shard of each, the prefilled prompt of each of the
    len(prompts)·n samples): each distinct prompt once per shard when `share`, else one
    copy per sample; the prompts in `apart` (with kept caches) each on their own."""
    sample_shard = np.repeat(prompt_shard, n)
    if not share:
        unique = [p for p in prompts for _ in range(n)]
        return unique, sample_shard, np.arange(len(unique))
    index: dict[tuple, int] = {}
    unique, shard_of, which = [], [], []
    for i, (d, p) in enumerate(zip(prompt_shard, prompts, strict=True)):
        key = (int(d), -1 if arms is None else int(arms[i]),
               ("kept", i) if i in apart else tuple(p))
        if key not in index:
            index[key] = len(unique)
            unique.append(list(p))
            shard_of.append(int(d))
        which.append(index[key])
    return unique, np.array(shard_of, np.int64), np.repeat(which, n)


def _resumed_pages(layout, sample_source: np.ndarray, rows: shards_lib.Placement,
                   unique_shard: np.ndarray, pools: list[PagePool], prompts, resume: dict
                   ) -> row_kv.Pages:
    """Where the prompts with kept caches (`resume`'s keys, n = 1) sit in this call."""
    per = pools[0].num_pages
    which = sorted(resume)
    lrows = layout.rows[sample_source[which]]
    shard = unique_shard[sample_source[which]]
    return row_kv.Pages(
        pages=(layout.tables[lrows] + shard[:, None] * per).astype(np.int32),
        start=layout.offsets[lrows].astype(np.int64),
        length=np.array([len(prompts[i]) for i in which], np.int64),
        device_row=rows.place[which].astype(np.int32))


def _partial_pages(layout, source: np.ndarray, own: np.ndarray, done: np.ndarray,
                   rows: shards_lib.Placement, generated: np.ndarray, pools: list[PagePool],
                   page_size: int) -> row_kv.Pages:
    """Where the unfinished samples' tokens sit, in sample order: the prompt's pages then
    the row's own, from the prompt's first slot to its last generated token."""
    per = pools[0].num_pages
    device = np.array([r for r in rows.place if not done[r]], np.int64)
    shard = device // rows.per
    pages = np.concatenate([layout.tables[source[device]], own[device]], axis=1)
    start = layout.offsets[source[device]].astype(np.int64)
    return row_kv.Pages(pages=(pages + shard[:, None] * per).astype(np.int32), start=start,
                        length=layout.slots - start + generated[device],
                        device_row=device.astype(np.int32))


def _budgets(given, r: int, max_new: int) -> np.ndarray:
    """[r] token budgets: `given` (`max_new_tokens_per_row`, [r] ints in [1, max_new])
    or max_new."""
    if given is None:
        return np.full(r, max_new, np.int64)
    given = np.asarray(given)
    if (given.shape != (r,) or not np.issubdtype(given.dtype, np.integer)
            or np.any(given < 1) or np.any(given > max_new)):
        raise ValueError(f"max_new_tokens_per_row must be {r} ints in [1, "
                         f"{max_new}], got shape {given.shape} {given.dtype}")
    return given.astype(np.int64)


def _decode_segments(decode: Callable, pools: list[PagePool], layout, source: np.ndarray,
                     hidden, carry, budget: np.ndarray, rows: shards_lib.Placement,
                     max_new: int, segment_len: int, page_size: int, stop_when):
    """Decodes in segments: each call attends over the pages written so far (the
    prompt's, read once per group, + the row's earlier segments) instead of the whole
    max length. Arrays are per device row (`rows`: each shard's block). Returns (the
    calls' outputs, [rows, pages] each row's own pages, [rows] done, whether
    `stop_when` stopped it early, the last call's (hidden, carry))."""
    real = rows.real()
    own = np.zeros((rows.rows, 0), np.int32)
    positions = layout.slots - layout.offsets[source]
    done = ~real
    outputs, generated = [], np.zeros(rows.rows, np.int64)
    seg_pages = segment_len // page_size
    segments = -(-max_new // segment_len)
    for seg in range(segments):
        fresh = np.full((rows.rows, seg_pages), NULL_PAGE, np.int32)
        for row in np.flatnonzero(~done):
            fresh[row] = pools[row // rows.per].alloc(seg_pages)
        # every real row keeps its place in its group whether or not it is done:
        # the shapes, and so the sums' order, then depend on the layout only, and
        # a row's tokens and log-probs do not depend on when the others stopped
        pages = engine.page_rows(layout.tables, layout.offsets, source, own, fresh, ~real,
                                 rows.count)
        state = engine.RowState(hidden=hidden, pages=pages, positions=positions, done=done,
                                ids=rows.ids())
        # running rows have generated seg * segment_len tokens; without budgets
        # this is max_new_tokens - seg * segment_len, as before
        limit = int((budget - generated)[~done].max())
        out, hidden, carry = decode(carry, state, seg, np.int32(limit), segment_len)
        out = engine.as_numpy(out)
        outputs.append(out)
        own = np.concatenate([own, fresh], axis=1)
        positions = positions + segment_len
        generated = generated + out.num_tokens
        done = done | (out.finish == engine.STOP) | (generated >= budget)
        if done.all():
            return outputs, own, done, False, (hidden, carry)
        if (stop_when is not None and seg + 1 < segments
                and stop_when(rows.to_items(done).copy())):
            return outputs, own, done, True, (hidden, carry)
    return outputs, own, done, False, (hidden, carry)


def to_rollouts(out, budget: np.ndarray, done: np.ndarray, num_prompts: int, n: int,
              width: int, pad, stats: dict) -> tuple[Rollouts, dict]:
    """The joined segment outputs as Rollouts of the r = num_prompts·n real rows, cut to
    their budgets [r] (`done` [r]: finished rather than stopped early), and `extra`."""
    num = out.num_tokens
    lengths = np.minimum(num, budget).astype(num.dtype)
    # [R, N]: drops tokens past a budget (N < width when every row finished early)
    keep = np.arange(min(width, out.tokens.shape[1])) < lengths[:, None]
    finish = np.where((out.finish == engine.STOP) & (num <= budget), "stop",
                      np.where(done, "length", "partial"))
    rollouts = Rollouts(
        tokens=np.where(keep, out.tokens[:, :width], pad), lengths=lengths,
        logprobs=np.where(keep, out.logprobs[:, :width], 0.0).astype(np.float32),
        raw_logprobs=np.where(keep, out.raw_logprobs[:, :width], 0.0).astype(np.float32),
        prompt_index=np.repeat(np.arange(num_prompts, dtype=np.int32), n),
        finish_reason=finish,
        stats=stats | {"partial_rows": int((finish == "partial").sum()),
                       "cut_tokens": int((num - lengths).sum())})
    extra = {k: np.where(keep, v[:, :width], 0).astype(v.dtype) for k, v in out.extra.items()}
    return rollouts, extra
