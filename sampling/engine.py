"""Jitted prefill and decode loop over the paged KV cache.

Two compiled programs serve both samplers:

  prefill(tokens [B, P])  -> last hidden state per prompt, cache written
  decode(state, steps)    -> up to `steps` tokens per row in one
                             `lax.while_loop` on device (host code runs only
                             before and after it), stopping early when every
                             row has finished

A row's state is the pages it reads (its group's shared prefix, its earlier
pages, the pages this call fills: `PageRows`), its RoPE position and the
final-norm hidden state of its last token; the next token is sampled from
that state, run through the decoder with page attention
(`models.paged_attention`), and its hidden state becomes the new one. Shapes
are bucketed (`sampling.layout`: rows, groups, prompt pages), so a training
run compiles each program once per bucket. `TRACE_COUNTS` counts traces per
program for tests and benchmarks. The loop itself, `decode_loop`, also runs
two models side by side for the lockstep sampler (`sampling.lockstep`), and a
prompt layout (`layout_prompts`) can be prefilled into several caches.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import models
from models import decode_tails, paged_attention, pallas_attention
from models.config import ModelConfig
from models.paged_attention import PageRows
from models.sharding import ActivationSharding
from sampling import processors
from sampling import shards as shards_lib
from sampling.kv_cache import (
    KVCache,
    head_logits,
    init_cache,
    paged_forward,
)
from sampling.layout import (  # noqa: F401  (re-exported: the samplers' entry points)
    PromptLayout,
    check_prompts,
    layout_prompts,
    next_pow2,
    page_rows,
    prompt_bucket,
    row_bucket,
)
from sampling.outputs import (  # noqa: F401  (re-exported: the samplers' host side)
    RUNNING,
    STOP,
    DecodeOutput,
    as_numpy,
    concat_outputs,
    empty_output,
    take_rows,
)
from sampling.params import SamplingParams

TRACE_COUNTS: collections.Counter = collections.Counter()


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class RowState:
    """Per-row decode inputs, all [S, ...] device arrays.

    `pages` says which pages a row reads: its group's shared prefix and its
    earlier pages, and the pages the call writes its tokens to
    (`models.paged_attention.PageRows`; built by `page_rows`).
    """

    hidden: jax.Array          # [S, D] final-norm hidden state of the last prefix token
    #                            (in `decode_loop`: a tuple of them, one per model)
    pages: PageRows
    positions: jax.Array       # [S] int32 RoPE position of the first new token
    done: jax.Array            # [S] bool rows that generate nothing
    ids: jax.Array | None = None  # [S] int32 each row's index in the one-device layout,
    #                            which its random draws follow (None: its place, 0..S-1;
    #                            rows placed by shard: `sampling.shards`)


@functools.partial(jax.jit, static_argnums=(0, 1), static_argnames=("sharding",))
def prefill(config: ModelConfig, num_pages: int, params: dict, tokens: jax.Array,
            tables: jax.Array, offsets: jax.Array, active: jax.Array,
            rows: jax.Array | None = None, sharding: ActivationSharding | None = None):
    """Creates a zeroed cache of `num_pages` pages (inside this program: no
    separate one to compile) and writes right-aligned prompts [B, P] into
    their pages `tables` [B, P / page_size].

    Returns (last-token hidden states [B, D], or [R, D] gathered by `rows`
    [R] when given, e.g. one row per sample; cache). With `sharding` (the
    learner's mesh and rules) prompt rows and pages are split over the batch
    axes in equal blocks, page ids local to each block (`sampling.shards`), and
    the pool's kv heads over `tensor`.
    """
    TRACE_COUNTS["prefill"] += 1
    shards = shards_lib.of(sharding)
    cache = shards_lib.constrain_pool(
        init_cache(config, num_pages, tokens.shape[1] // tables.shape[1]), shards)
    hidden, cache = paged_forward(config, params, cache, tokens, tables, offsets, active,
                                  sharding, store=shards_lib.local(
                                      shards, paged_attention.write,
                                      ("pool", "whole", "rows", "rows", "rows", "rows"), "pool"))
    cache = shards_lib.constrain_pool(cache, shards)
    hidden = hidden[:, -1]
    return (hidden if rows is None else hidden[rows]), cache


def _views(cache: KVCache, pages: PageRows) -> tuple[jax.Array, jax.Array]:
    """The dense-view baseline's per-row copies of [group | own | segment]
    pages: keys [L, S, K, Dh, W], values [L, S, K, W, Dh]."""
    tables = jnp.concatenate([paged_attention.context_tables(pages), pages.segment_tables],
                             axis=1)
    n, _, kv, dh, ps = cache.k.shape
    s, mp = tables.shape
    keys = cache.k[:, tables].transpose(0, 1, 3, 4, 2, 5).reshape(n, s, kv, dh, mp * ps)
    values = cache.v[:, tables].transpose(0, 1, 3, 2, 4, 5).reshape(n, s, kv, mp * ps, dh)
    return keys, values


# XLA:CPU compiler options of the decode program: none today. The former
# decode kept YNNPACK to reductions on the CPU (~15% faster on W1's dense-view
# decode); it was dropped while a compiler crash in long test workers was
# investigated (the crash recurred without it) and not re-measured since
# (docs/sampling.md).
DECODE_OPTIONS: dict[str, dict] = {}


def decode_options(backend: str) -> dict | None:
    """XLA compiler options of the decode program on `backend` (None: defaults)."""
    return DECODE_OPTIONS.get(backend)


def jit_decode(fn: Callable, static_argnums: tuple[int, ...],
               donate_argnums: tuple[int, ...]) -> Callable:
    """`fn` jitted once per backend with `decode_options` (a decode program), its page
    attention traced with `pallas_attention.partials_for(backend)` (on TPU the Pallas
    kernel); the returned callable's `.program(backend)` is that backend's jitted
    function (`.lower` it for another backend's devices)."""
    programs: dict[str, Callable] = {}

    def program(backend: str) -> Callable:
        """The jitted program for `backend` (`.lower` it for another backend's devices)."""
        if backend not in programs:
            @functools.wraps(fn)
            def traced(*args):  # page attention by the backend's partials (TPU: a kernel)
                with pallas_attention.partials(pallas_attention.partials_for(backend)):
                    return fn(*args)

            programs[backend] = jax.jit(traced, static_argnums=static_argnums,
                                        donate_argnums=donate_argnums,
                                        compiler_options=decode_options(backend))
        return programs[backend]

    def call(*args):
        return program(jax.default_backend())(*args)

    call.program = program
    return call


ATTENTION = ("shared_prefix", "dense_view")


def decode(config: ModelConfig, params: dict, cache: KVCache, state: RowState, rng: jax.Array,
           call: int, limit: jax.Array, sampling: SamplingParams, steps: int,
           stop_ids: tuple[int, ...], attention: str = "shared_prefix",
           sharding: ActivationSharding | None = None):
    """Samples up to min(steps, limit) tokens per row; a row stops on `stop_ids`.
    Jitted per backend (`config`, `sampling`, `steps`, `stop_ids`, `attention`
    static; the cache donated), with `decode_options`; see
    `_decode`. `attention`: "shared_prefix" (page attention, the default) or
    "dense_view" (the per-row dense copies it replaced, for benchmarks)."""
    if attention not in ATTENTION:
        raise ValueError(f"attention must be one of {ATTENTION}, got {attention!r}")
    return _decode_program(config, params, cache, state, rng, np.int32(call), limit, sampling,
                           steps, stop_ids, attention, sharding)


def _decode(config: ModelConfig, params: dict, cache: KVCache, state: RowState, rng: jax.Array,
            call: jax.Array, limit: jax.Array, sampling: SamplingParams, steps: int,
            stop_ids: tuple[int, ...], attention: str = "shared_prefix",
            sharding: ActivationSharding | None = None):
    """Samples up to min(steps, limit) tokens per row; a row stops on `stop_ids`.
    Step i draws with key fold_in(fold_in(rng, call), i): a sampler numbers its
    calls (segments, tree rounds) so each draws afresh from one `rng`.

    Returns (DecodeOutput, final hidden states [S, D], cache); see `decode_loop`.
    """
    TRACE_COUNTS["decode"] += 1
    state = dataclasses.replace(state, hidden=(state.hidden,))
    out, (hidden,), (cache,), _ = decode_loop(((config, params),), (cache,), state, rng, call,
                                               limit, steps, stop_ids, policy_pick(sampling),
                                               attention=attention, sharding=sharding)
    return out, hidden, cache


def policy_pick(sampling: SamplingParams) -> Callable:
    """`decode_loop`'s `pick` of plain sampling: the first model's (the policy's) logits
    drawn under `sampling`, no recorded values, `extra` unchanged."""
    def pick(logits, key, extra, active, ids):
        del active
        return *processors.sample(logits[0], key, sampling, ids), {}, extra

    return pick


_decode_program = jit_decode(_decode, static_argnums=(0, 7, 8, 9, 10, 11), donate_argnums=(2,))
decode_program = _decode_program.program  # backend -> the jitted decode (for `.lower`)


def decode_loop(models_: tuple, caches: tuple, state: RowState, rng: jax.Array,
                call: jax.Array, limit: jax.Array, steps: int, stop_ids: tuple[int, ...],
                pick: Callable, extra=(), columns: dict | None = None,
                attention: str = "shared_prefix", sharding: ActivationSharding | None = None,
                fork: bool = False):
    """The decode loop of one or more models fed the same tokens side by side.

    `models_` is a tuple of (config, params), each with its own cache in
    `caches` (all under the same page tables) and hidden state in the tuple
    `state.hidden`. Step i calls `pick(logits, key, extra, active, ids)` with the
    models' fp32 logits [S, V] (a tuple), key fold_in(fold_in(rng, call), i),
    the loop-carried `extra` and the running rows [S]; it returns (token,
    logp, raw_logp, {name: [S] value}, extra), the values recorded into
    `out.extra[name]` [S, steps] of dtype `columns[name]` (0 where not running).

    Each step runs the token through the one decoder (`models.run_layers`,
    layers under `lax.scan`, or unrolled with `config.scan_layers` off: then the
    tails are one array per layer, `decode_tails.split_layers`) with page attention
    (`models.paged_attention.decode_attend`): groups read their shared pages
    once, rows their earlier pages, and the call's tokens stay in a dense
    per-row tail that is written to `segment_tables` when the loop ends.
    "dense_view" instead copies every row's pages into a dense view once per
    call (the former decode, kept as the benchmarks' baseline). With
    `sharding`, rows run over the batch axes and heads over `tensor`; the
    weights are used where they are (not fused, which would move shards).

    `fork`: rows may take over other rows' state within the call (LATR's branches,
    `sampling.latr_step`): `pick` then returns a sixth value (src [S] int32, done [S]
    bool), and before the step's token a row s with src[s] != s becomes a copy of row
    src[s] (its tokens so far, its own pages, its tail of this call's keys); `done`
    replaces the running set. Every row with this call's pages is then written back.

    Returns (DecodeOutput, final hidden states (tuple), caches (tuple), extra).
    """
    pages = state.pages
    s = pages.row_group.shape[0]
    pad = jnp.int32(models_[0][0].pad_token_id or 0)
    decoders = [_decoder(config, params, sharding) for config, params in models_]
    out = empty_output(s, steps, pad, columns)
    pools = tuple((c.k, c.v) for c in caches)
    shards = shards_lib.of(sharding)
    attend_for, tails, before = _attention(caches, pools, pages, steps, attention, shards)
    tails = tuple(t if config.scan_layers else decode_tails.split_layers(t)
                  for (config, _), t in zip(models_, tails, strict=True))
    pools = shards_lib.constrain_pool(pools, shards)
    tails = shards_lib.constrain_pool(tails, shards)
    body = _decode_body(models_, decoders, pools, attend_for, pick,
                        processors.fold_in(rng, call),
                        jnp.asarray(stop_ids if stop_ids else (-1,), jnp.int32), pad,
                        state.positions, state.ids, before, sharding, shards, fork)
    limit = jnp.minimum(jnp.int32(steps), limit)

    def cond(carry):
        i, _, done, *_ = carry
        return (i < limit) & ~jnp.all(done)

    carry = (jnp.int32(0), state.hidden, state.done, out, extra, tails, pages.own_tables)
    _, hiddens, _, out, extra, tails, _ = jax.lax.while_loop(cond, body, carry)
    # the call's tokens go to their pages (the dense views' last `steps` columns)
    write = shards_lib.local(shards, decode_tails.write_tail,
                             ("pool", "pool", "rows", "rows"), "pool")
    written = pages.segment_tables[:, 0] != 0 if fork else ~state.done
    caches = tuple(KVCache(*write(pool, decode_tails.call_tokens(tail, before), pages,
                                  written))
                   for pool, tail in zip(pools, tails, strict=True))
    return out, hiddens, caches, extra


def _decoder(config: ModelConfig, params: dict, sharding: ActivationSharding | None):
    """(the layers' weights, the output matrix) of a decode: q|k|v and gate|up fused
    without `sharding` (with it the weights are used where they are: fusing would move
    shards); with `config.scan_layers` off, the layers sliced once, outside the loop."""
    if sharding is None:
        params = dict(params, layers=models.fuse_layers(config, params["layers"]))
    if not config.scan_layers:
        params = dict(params, layers=models.layer_list(params["layers"]))
    return params, models.output_matrix(config, params)


def _attention(caches: tuple, pools: tuple, pages: PageRows, steps: int, attention: str,
               shards: shards_lib.Shards):
    """(attend_for(i, pool, tail, own_tables), the per-row tails, the tail slots before the call's
    tokens) of the decode's attention, each page lookup run per batch shard.

    With no group of two rows nothing is shared: each row's context is its own
    distinct pages, and copying them once per call into a dense view costs no more
    memory than the pages themselves while sparing a page gather per step
    (docs/sampling.md: 6.24 s gathered vs 4.53 s viewed on 64 × 128 × 256 on XLA:CPU).
    """
    if pages.group_rows.shape[1] == 1:
        attention = "dense_view"
    if attention != "dense_view":  # the call's own tokens: [L, S, K, Dh, steps] / [.., Dh]
        tails = tuple(decode_tails.init_tail(pool, pages) for pool in pools)
        # (rows, step, the layer's pool [P, ..], its tail [S, ..], q, k, v) -> out [S, ..]
        layer = shards_lib.local(shards, paged_attention.decode_attention,
                                 ("rows", "whole", "rows", "rows", "rows", "rows", "rows"),
                                 "rows")
        return (lambda i, pool, tail, own: paged_attention.decode_attend(
                    dataclasses.replace(pages, own_tables=own), i, pool, tail, layer),
                tails, 0)
    # [L, S, K, Dh, W] / [L, S, K, W, Dh] copies of [group | own | segment] pages
    ps = caches[0].page_size
    views = shards_lib.local(shards, _views, ("pool", "rows"), "pool")
    tails = tuple(views(c, pages) for c in caches)
    before = tails[0][0].shape[-1] - steps  # view slots before the call's tokens
    slots = jnp.arange(before + steps, dtype=jnp.int32)
    group_end = pages.group_tables.shape[1] * ps
    # each row's group offset: `row_group` indexes its own shard's block of groups
    s, g = pages.row_group.shape[0], pages.group_offsets.shape[0]
    block = jnp.arange(s, dtype=jnp.int32) // (s // shards.count) * (g // shards.count)
    start = pages.group_offsets[block + pages.row_group]
    shared = (slots[None] < group_end) & (slots[None] >= start[:, None])
    if pages.own_tables is not None:  # the own slots that hold a token (gaps skipped)
        own = paged_attention.own_mask(pages, ps).reshape(s, -1)
        shared = shared | jnp.pad(own, ((0, 0), (group_end, steps)))

    def attend_for(i, pool, tail, own):
        del pool, own  # a row's own pages are in its view
        mask = shared | ((slots[None] >= before) & (slots[None] < before + i))
        return paged_attention.view_attend(mask, tail)

    return attend_for, tails, before


def _decode_body(models_: tuple, decoders: list, pools: tuple, attend_for: Callable,
                 pick: Callable, call_rng: jax.Array, stops: jax.Array, pad: jax.Array,
                 positions: jax.Array, ids: jax.Array | None, before,
                 sharding: ActivationSharding | None, shards: shards_lib.Shards,
                 fork: bool = False):
    """The `while_loop` body of `decode_loop`: one token for every running row."""
    s = positions.shape[0]

    def body(carry):
        i, hiddens, done, out, extra, tails, own = carry
        logits = tuple(head_logits(head, hidden)
                       for (_, head), hidden in zip(decoders, hiddens, strict=True))
        token, logp, raw, values, extra, *moved = pick(
            logits, processors.fold_in(call_rng, i), extra, ~done, ids)
        if fork:
            (src, done), = moved
            out, tails, own = _copy_rows(src, out, tails, own)
        active = ~done
        out = dataclasses.replace(
            out, tokens=_set_column(out.tokens, token, i, active, pad),
            logprobs=_set_column(out.logprobs, logp, i, active, 0.0),
            raw_logprobs=_set_column(out.raw_logprobs, raw, i, active, 0.0),
            num_tokens=out.num_tokens + active, steps=i + 1,
            extra={k: _set_column(out.extra[k], values[k], i, active, 0) for k in out.extra})
        stepped = [models.run_layers(config, fused, token[:, None], (positions + i)[:, None],
                                     attend_for(i, pool, tail, own),
                                     paged_attention.new_kv(pool, s), sharding=sharding)
                   for (config, _), (fused, _), pool, tail
                   in zip(models_, decoders, pools, tails, strict=True)]
        stopped = active & jnp.isin(token, stops)
        out = dataclasses.replace(out, finish=jnp.where(stopped, STOP, out.finish))
        hiddens = tuple(jnp.where(active[:, None], new_hidden[:, 0], hidden)
                        for (new_hidden, _), hidden in zip(stepped, hiddens, strict=True))
        tails = shards_lib.constrain_pool(
            tuple(decode_tails.store_step(tail, new, before + i)
                  for (_, new), tail in zip(stepped, tails, strict=True)), shards)
        return i + 1, hiddens, done | stopped, out, extra, tails, own

    return body


def _copy_rows(src: jax.Array, out: DecodeOutput, tails: tuple, own: jax.Array | None):
    """Rows s with src[s] != s become copies of row src[s] before the step: their tokens and
    log-probs so far, their own pages and their tails (the keys of this call's steps, or
    the dense view). Copied only in the steps where some row moves."""
    def copy(state):
        out, tails, own = state
        take = lambda x: x[src]  # noqa: E731
        out = dataclasses.replace(
            out, tokens=take(out.tokens), logprobs=take(out.logprobs),
            raw_logprobs=take(out.raw_logprobs), num_tokens=take(out.num_tokens),
            finish=take(out.finish), extra={k: take(v) for k, v in out.extra.items()})
        tails = tuple(decode_tails.take_rows(t, src) for t in tails)
        return out, tails, None if own is None else take(own)

    moved = jnp.any(src != jnp.arange(src.shape[0], dtype=src.dtype))
    return jax.lax.cond(moved, copy, lambda state: state, (out, tails, own))


def _set_column(buf: jax.Array, x: jax.Array, i, active: jax.Array, fill) -> jax.Array:
    """buf[:, i] = x where active else fill."""
    x = jnp.where(active, x, fill).astype(buf.dtype)
    return jax.lax.dynamic_update_slice_in_dim(buf, x[:, None], i, axis=1)


def stop_token_ids(config: ModelConfig, sampling: SamplingParams) -> tuple[int, ...]:
    return tuple(sorted(set(config.eos_token_ids) | set(sampling.stop_token_ids)))


def prefill_layout(config: ModelConfig, params: dict, num_pages: int, layout: PromptLayout,
                   rows: np.ndarray | None = None, sharding: ActivationSharding | None = None):
    """`prefill` of a `PromptLayout` into a new cache of `num_pages` pages."""
    return prefill(config, num_pages, params, layout.tokens, layout.tables, layout.offsets,
                   layout.active, rows, sharding=sharding)
