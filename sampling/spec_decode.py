"""Speculative decode calls: each row advances by a verified draft per policy forward.

A call of `decode` here replaces `engine.decode` for one segment (same inputs, same
outputs: up to `steps` tokens per row, the call's keys written to its segment pages,
the final hidden states). Its first token is drawn from the rows' hidden states as
plain decoding draws it; then every iteration

  1. drafts up to k tokens per row (`SpecConfig.drafter`: `speculative.ngram_draft`
     over the row's own text and its group's, or a small model's own decode);
  2. runs the pending token and the drafts, [y, d1..dk], through the policy in one
     forward over the pages (`models.chunk_attention`: the chunk's
     queries read the group's shared pages once, the row's own pages, its tail and
     the chunk causally), giving the sampling distribution at each of the k + 1
     positions (`processors.sampling_logprobs`, every filter applied);
  3. keeps a prefix of the drafts by the lossless rule (`speculative.verify`) and
     appends one token of the policy's own, cut at a stop token and at the row's
     budget; the kept tokens' keys stay in the row's tail, the rest are overwritten
     (a row's tail is read up to its own count: rows advance by different counts).

The last emitted token is run through the policy once more when the loop ends, so
the call leaves what plain decoding leaves: every token's keys in the pages and the
hidden state of the last one. The tokens are distributed exactly as plain sampling's
(not drawn with the same random numbers); greedy decoding gives identical tokens.
`stats` counts, over the call: row-forwards of running rows, drafts proposed and
drafts kept (tokens per forward = tokens / row-forwards).
"""

from __future__ import annotations

import dataclasses
import numbers

import jax
import jax.numpy as jnp

import models
from models import chunk_attention, decode_tails
from models.config import ModelConfig
from models.sharding import ActivationSharding
from sampling import engine, processors, spec_model, speculative
from sampling import shards as shards_lib
from sampling.kv_cache import KVCache, head_logits
from sampling.outputs import STOP, DecodeOutput, empty_output
from sampling.params import SamplingParams

DRAFTERS = ("ngram", "model")


@dataclasses.dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding (`sampling.speculative.*` in a run's config).

    draft_len: k, the most tokens drafted per row and iteration (the verify forward
      runs k + 1 tokens per row).
    drafter: "ngram" (prompt lookup over the row's and its group's text) or "model" (a
      small model with the policy's vocabulary drafts by its own decode,
      `sampling.spec_model`; `generate(..., draft_model=(config, params))`).
    ngram_max / ngram_min: the longest and shortest suffix the n-gram drafter matches.
    ngram_rows: the most rows of its group (itself first, then its nearest siblings) a
      row's n-gram drafter searches.
    max_rows: a decode call runs speculatively when at most this many rows are still
      running (0: always). At large batch a forward of k + 1 tokens per row costs up to
      k + 1 times one token's, so speculation pays in the small-batch tail of a rollout
      (EfficientRollout's switch).
    min_tokens_per_forward: after a speculative call that emitted fewer tokens per
      row-forward than this, the generate call's later calls decode plainly (0: never):
      where drafts are not kept a verify costs more than a plain step.
    """

    draft_len: int = 4
    drafter: str = "ngram"
    ngram_max: int = 3
    ngram_min: int = 1
    ngram_rows: int = 8
    max_rows: int = 0
    min_tokens_per_forward: float = 0.0

    def __post_init__(self):
        def whole(name, low):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
                raise ValueError(f"speculative.{name} must be an int >= {low}, got {value!r}")

        whole("draft_len", 1)
        whole("ngram_min", 1)
        whole("ngram_max", 1)
        whole("ngram_rows", 1)
        whole("max_rows", 0)
        floor = self.min_tokens_per_forward
        if (not isinstance(floor, numbers.Real) or isinstance(floor, bool)
                or not 0.0 <= floor <= self.draft_len + 1):
            raise ValueError(f"speculative.min_tokens_per_forward must be a number in [0, "
                             f"draft_len + 1 = {self.draft_len + 1}], got {floor!r}")
        if self.drafter not in DRAFTERS:
            raise ValueError(f"speculative.drafter must be one of {DRAFTERS}, got "
                             f"{self.drafter!r}")
        if self.ngram_min > self.ngram_max:
            raise ValueError(f"speculative.ngram_min ({self.ngram_min}) must be <= ngram_max "
                             f"({self.ngram_max})")

    def runs(self, running: int) -> bool:
        """Whether a call with `running` rows still going runs speculatively."""
        return self.max_rows == 0 or running <= self.max_rows


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Texts:
    """What the n-gram drafter reads, [S, ...] device arrays.

    tokens:  [S, T] int32 each row's tokens so far (prompt, then what earlier calls
             emitted), left-aligned; T leaves room for the call's tokens.
    lengths: [S] int32.
    members: [S, M] int32 the rows each row searches, itself first (-1: unused).
    """

    tokens: jax.Array
    lengths: jax.Array
    members: jax.Array


def _put(buf: jax.Array, x: jax.Array, at: jax.Array, emit: jax.Array) -> jax.Array:
    """buf [S, W] with columns at[s] + j = x[s, j] for j < emit[s] (x [S, C])."""
    s, c = x.shape
    j = jnp.arange(c)[None]
    cols = jnp.where(j < emit[:, None], at[:, None] + j, buf.shape[1])  # past W: dropped
    return buf.at[jnp.arange(s)[:, None], cols].set(x.astype(buf.dtype), mode="drop")


def _record(out: DecodeOutput, tokens, logp, raw, at, emit) -> DecodeOutput:
    """out's columns at[s] + j = tokens/logp/raw [S, C] for j < emit[s]."""
    put = lambda buf, x: _put(buf, x, at, emit)  # noqa: E731
    return dataclasses.replace(out, tokens=put(out.tokens, tokens),
                               logprobs=put(out.logprobs, logp),
                               raw_logprobs=put(out.raw_logprobs, raw),
                               num_tokens=out.num_tokens + emit)


def _forward(config, decoder, pages, pool, tails, chunk, start, positions, sharding):
    """The policy over chunk [S, C] at tail columns start.. -> (hidden [S, C, D], tails).
    The page lookups run per batch shard (`sampling.shards.local`)."""
    fused, _ = decoder
    s, c = chunk.shape
    shards = shards_lib.of(sharding)
    pos = (positions + start)[:, None] + jnp.arange(c, dtype=jnp.int32)[None]
    layer = shards_lib.local(shards, chunk_attention.chunk_attention, ("rows",) * 7, "rows")
    attend = chunk_attention.chunk_attend(pages, start, pool, tails, layer)
    hidden, new = models.run_layers(config, fused, chunk, pos, attend,
                                    chunk_attention.new_chunk_kv(pool, s, c), scan=True,
                                    sharding=sharding)
    return hidden, shards_lib.constrain_pool(chunk_attention.store_chunk(tails, new, start),
                                             shards)


def _emitted(tokens, accepted, room, active, stops):
    """(emit [S] tokens kept: the accepted drafts and the policy's token, cut after a stop
    token and at `room`; stopped [S])."""
    c = tokens.shape[1]
    emit = jnp.minimum(accepted + 1, room)
    hit = jnp.isin(tokens, stops) & (jnp.arange(c)[None] < emit[:, None])
    stopped = active & jnp.any(hit, axis=1)
    emit = jnp.where(stopped, jnp.argmax(hit, axis=1) + 1, emit)
    return jnp.where(active, emit, 0).astype(jnp.int32), stopped


def _token_logps(logits, target, tokens):
    """(the tokens' log-probs under the sampling distribution, under the raw model)."""
    raw = jax.nn.log_softmax(logits, axis=-1)
    take = lambda lp: jnp.take_along_axis(lp, tokens[..., None], axis=-1)[..., 0]  # noqa: E731
    return take(target), take(raw)


def _append(texts: Texts, tokens, emit) -> Texts:
    """The row texts with tokens [S, C] (the first emit[s]) appended."""
    return dataclasses.replace(texts, tokens=_put(texts.tokens, tokens, texts.lengths, emit),
                               lengths=texts.lengths + emit)


def _first_token(head, state, texts: Texts, call_rng, sampling, limit, stops, steps: int,
                 pad):
    """The call's first token, drawn from the rows' hidden states as plain decoding draws
    it -> (token [S], the output with it, the texts with it, stopped [S])."""
    s = state.done.shape[0]
    out = empty_output(s, steps, pad)
    active = ~state.done & (limit > 0)
    y, logp, raw = processors.sample(head_logits(head, state.hidden),
                                     processors.fold_in(call_rng, 0), sampling, state.ids)
    emit = active.astype(jnp.int32)
    out = _record(out, y[:, None], logp[:, None], raw[:, None], jnp.zeros(s, jnp.int32), emit)
    return y, out, _append(texts, y[:, None], emit), active & jnp.isin(y, stops)


def _proposer(spec: SpecConfig, sampling, drafter, forward):
    """propose(i, key, texts, y, n, dtails) -> (draft [S, k], proposed [S], q [S, k, V] or
    None, dtails): the n-gram drafter's (one sequence: q a point mass; dtails = ()), or the
    drafter model's (`spec_model.draft`, from the pending token y at tail column n - 1;
    dtails = (its tail,))."""
    k = spec.draft_len
    if drafter is None:
        def propose(i, key, texts, y, n, dtails):
            del i, key, y, n
            draft, proposed = speculative.ngram_draft(texts.tokens, texts.lengths, texts.members,
                                                      spec.ngram_max, k, spec.ngram_min)
            return draft, proposed, None, dtails
        return propose
    draft_config, draft_decoder = drafter

    def propose(i, key, texts, y, n, dtails):
        del i, texts
        draft, q, tail = spec_model.draft(draft_config, draft_decoder, forward, dtails[0], y,
                                          n - 1, k, sampling, processors.fold_in(key, 1))
        return draft, jnp.full(y.shape, k, jnp.int32), q, (tail,)
    return propose


def _decoders(config, params, draft_config, draft_params, sharding) -> tuple:
    """(the policy's (layers, output matrix), the drafter's or None): layers fused unless
    sharded, as `engine.decode_loop` uses them."""
    def of(c, p):
        return (p if sharding is not None else dict(p, layers=models.fuse_layers(c, p["layers"])),
                models.output_matrix(c, p))
    return of(config, params), (None if draft_config is None else of(draft_config, draft_params))


def _decode(config: ModelConfig, params: dict, cache: KVCache, state: engine.RowState,
            rng: jax.Array, call: jax.Array, limit: jax.Array, sampling: SamplingParams,
            steps: int, stop_ids: tuple[int, ...], spec: SpecConfig, texts: Texts,
            sharding: ActivationSharding | None = None, draft_config: ModelConfig | None = None,
            draft_params: dict | None = None, draft_cache: KVCache | None = None):
    """Up to min(steps, limit) tokens per row by speculative decoding (module doc).
    `sharding`: rows over the batch axes, heads over `tensor`, the page lookups per batch
    shard and the weights used where they are, as `engine.decode_loop` does. With a drafter
    model (`draft_config`, `sampling.spec_model`), `state.hidden` is (policy's, drafter's)
    and its cache `draft_cache`.
    Returns (DecodeOutput, final hidden [S, D] (a pair with a drafter model), cache (a pair
    with a drafter model), stats [3] int32)."""
    engine.TRACE_COUNTS["spec_decode"] += 1
    pages = state.pages
    hidden0, hidden0_draft = state.hidden if draft_config is not None else (state.hidden, None)
    state = dataclasses.replace(state, hidden=hidden0)
    s = pages.row_group.shape[0]
    pad = jnp.int32(config.pad_token_id or 0)
    decoder, draft_decoder = _decoders(config, params, draft_config, draft_params, sharding)
    tail_pages = -(-(steps + spec.draft_len + 1) // cache.page_size)
    tail_rows = dataclasses.replace(pages, segment_tables=jnp.zeros((s, tail_pages), jnp.int32))
    pools = [(cache.k, cache.v)] + ([] if draft_cache is None else [(draft_cache.k, draft_cache.v)])
    tails = [shards_lib.constrain_pool(decode_tails.init_tail(p, tail_rows),
                                       shards_lib.of(sharding)) for p in pools]
    forwards = [lambda c, d, t, chunk, start, pool=pool: _forward(
        c, d, pages, pool, t, chunk, start, state.positions, sharding) for pool in pools]
    propose = _proposer(spec, sampling, None if draft_config is None
                        else (draft_config, draft_decoder), forwards[-1])
    stops = jnp.asarray(stop_ids if stop_ids else (-1,), jnp.int32)
    call_rng = processors.fold_in(rng, call)
    limit = jnp.minimum(jnp.int32(steps), limit)
    y, out, texts, stopped = _first_token(decoder[1], state, texts, call_rng, sampling, limit,
                                          stops, steps, pad)
    done = state.done | stopped | (out.num_tokens >= limit)

    def body(carry):
        i, y, done, out, tails, texts, counts = carry
        active = ~done
        n = out.num_tokens
        key = processors.fold_in(call_rng, i)
        draft, proposed, q, draft_tails = propose(i, key, texts, y, n, tails[1:])
        proposed = jnp.where(active, jnp.minimum(proposed, jnp.maximum(limit - n - 1, 0)), 0)
        chunk = jnp.concatenate([y[:, None], draft], axis=1)              # [S, k + 1]
        # a finished row writes past its last token (never read; its last token's keys are
        # written again after the loop)
        hidden, new_tails = forwards[0](config, decoder, tails[0], chunk, n - 1)
        logits = head_logits(decoder[1], hidden)                           # [S, k + 1, V]
        target = processors.sampling_logprobs(logits, sampling)
        accepted, tokens = speculative.verify(target, draft, proposed, key, q)
        emit, stopped = _emitted(tokens, accepted, limit - n, active, stops)
        logp, raw = _token_logps(logits, target, tokens)
        out = _record(out, tokens, logp, raw, n, emit)
        out = dataclasses.replace(out, finish=jnp.where(stopped, STOP, out.finish))
        last = jnp.take_along_axis(tokens, jnp.maximum(emit - 1, 0)[:, None], axis=1)[:, 0]
        counts = counts + jnp.stack([jnp.sum(active), jnp.sum(proposed),
                                     jnp.sum(jnp.minimum(accepted, emit))]).astype(jnp.int32)
        done = done | stopped | (out.num_tokens >= limit)
        return (i + 1, jnp.where(emit > 0, last, y), done, out, (new_tails, *draft_tails),
                _append(texts, tokens, emit), counts)

    carry = (jnp.int32(1), y, done, out, tuple(tails), texts, jnp.zeros(3, jnp.int32))
    iters, y, _, out, tails, _, counts = jax.lax.while_loop(lambda c: ~jnp.all(c[2]), body,
                                                            carry)
    out = dataclasses.replace(out, finish=jnp.where(stopped, STOP, out.finish), steps=iters)
    both = [(config, decoder, hidden0)] + ([] if draft_config is None else [
        (draft_config, draft_decoder, hidden0_draft)])
    hidden, caches = _finish(both, forwards, pools, tails, pages, y, out.num_tokens,
                             ~state.done, steps, sharding)
    counts = counts.at[0].add(jnp.sum(out.num_tokens > 0))
    if draft_config is None:
        return out, hidden[0], caches[0], counts
    return out, hidden, caches, counts


def _finish(models_: list, forwards: list, pools: list, tails: tuple, pages, y, n, written,
            steps: int, sharding):
    """The last token y [S] through each model of `models_` [(config, decoder, hidden before
    the call)] (its keys to the pages, its hidden state out; rows that emitted nothing keep
    theirs) and each tail written to the call's pages where `written` [S]
    -> (hidden per model, KVCache per model)."""
    write = shards_lib.local(shards_lib.of(sharding), decode_tails.write_tail,
                             ("pool", "pool", "rows", "rows"), "pool")
    hiddens, caches = [], []
    for (c, decoder, before), forward, pool, tail in zip(models_, forwards, pools, tails,
                                                          strict=True):
        hidden, tail = forward(c, decoder, tail, y[:, None], n - 1)
        hiddens.append(jnp.where((n > 0)[:, None], hidden[:, 0], before))
        cut = (tail[0][..., :steps], tail[1][:, :, :, :steps])
        caches.append(KVCache(*write(pool, cut, pages, written)))
    return tuple(hiddens), tuple(caches)


decode = engine.jit_decode(_decode, static_argnums=(0, 7, 8, 9, 10, 12, 13),
                           donate_argnums=(2, 15))
