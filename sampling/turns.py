"""Multi-turn rollouts on the paged sampler: a policy's turns and an environment's
replies in one growing token sequence per row, never re-rendered.

    rollouts = sampling.generate_turns(config, params, prompts, n, sp, rng, respond,
                                       max_turns=4, max_turn_tokens=64)

`respond(ends)` is the environment (`rl.envs` adapts a tokenizer and tools to it): given
the rows whose turn just stopped (`TurnEnd`: the row, the tokens of its turn), it
returns for each the token ids to append (the tool's reply, already in the chat
template's tool-response format) or None to end the episode. The reply is appended
onto the row's own pages by a prefill chunk (`sampling.kv_cache.extend_forward`) that
attends to the row's pages; the row's prompt pages stay shared with its group, its
earlier tokens stay where they are, and a turn's or a reply's unused slots are gaps
that attention skips (`PageRows.own_valid`). So the log-probs the sampler records are
those of the exact token sequence the learner will score.

Schedule (the same for every run of the same inputs, so a rollout is reproducible):
decoding runs in segments as in the flat sampler. A row whose turn stops in segment s
is *parked*: the environment answers while segment s + 1 decodes the other rows (its
pages stay referenced), and the row decodes again from segment s + 2. Segment s's draws
use key fold_in(rng, s) and the row's index, as `sampling.flat`.

Limits: `sp.max_new_tokens` is the episode's whole budget after the prompt (its turns
and the replies); `max_turn_tokens` a turn's; `max_turns` the policy's turns. A row
ends with finish reason "stop" when the environment ends it (the last allowed turn is
sent to it too), "length" when a budget cuts it or the environment answers the last
allowed turn (`stats["turn_limit_rows"]` counts the latter).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable, Sequence

import jax
import numpy as np

from models.config import ModelConfig
from sampling import engine
from sampling import shards as shards_lib
from sampling.flat import check_layout, distinct, shard_layout
from sampling.kv_cache import extend_forward
from sampling.page_pool import NULL_PAGE
from sampling.params import SamplingParams
from sampling.rollouts import Rollouts


@dataclasses.dataclass(frozen=True)
class TurnEnd:
    """Row `row` (its sample index, prompt-major) stopped a turn with `tokens`."""
    row: int
    tokens: tuple[int, ...]


Respond = Callable[[Sequence[TurnEnd]], Sequence[Sequence[int] | None]]

def _extend_rows(config, params, cache, hidden, where, *chunk):
    """`extend_forward`, its hidden states put into the device rows `where` [B] of
    `hidden` [S, D] (an index past S: a padding row, dropped) -> (hidden, cache)."""
    new, cache = extend_forward(config, params, cache, *chunk)
    return hidden.at[where].set(new.astype(hidden.dtype), mode="drop"), cache


_extend = jax.jit(_extend_rows, static_argnums=(0,), donate_argnums=(2, 3))


@dataclasses.dataclass
class _Row:
    """One sample's host state."""
    position: int                       # RoPE position of its next token
    pages: list = dataclasses.field(default_factory=list)   # own pages, in order
    filled: list = dataclasses.field(default_factory=list)  # tokens in each own page
    tokens: list = dataclasses.field(default_factory=list)
    logprobs: list = dataclasses.field(default_factory=list)
    raw: list = dataclasses.field(default_factory=list)
    generated: list = dataclasses.field(default_factory=list)  # True: the policy's token
    turns: int = 1
    turn_tokens: int = 0
    finish: str | None = None
    turn_limit: bool = False


def generate_turns(config: ModelConfig, params: dict, prompts, n: int,
                   sampling_params: SamplingParams, rng: jax.Array, respond: Respond, *,
                   max_turns: int, max_turn_tokens: int, page_size: int = 16,
                   segment_len: int = 64) -> Rollouts:
    """`n` multi-turn episodes of each prompt; see the module docstring. Returns Rollouts
    whose `loss_mask` is False on the environment's tokens (their log-probs are 0) and
    `turns` [R] the policy's turns; stats add observed_tokens, extend_calls, parked_rows
    and turn_limit_rows."""
    sp = sampling_params
    if max_turns < 1 or max_turn_tokens < 1:
        raise ValueError(f"max_turns and max_turn_tokens must be >= 1, got {max_turns} and "
                         f"{max_turn_tokens}")
    check_layout(n, page_size, segment_len)
    prompts = engine.check_prompts(config, prompts)
    stop_ids = engine.stop_token_ids(config, sp)
    r = len(prompts) * n
    rows = shards_lib.place(np.zeros(r, np.int64), 1)
    unique, unique_shard, sample_source = distinct(prompts, n, True, np.zeros(len(prompts),
                                                                               np.int64))
    seg_pages = segment_len // page_size
    # a row's pages: its tokens, a gap of < 1 page per turn end and per reply, and one
    # segment allocated ahead
    row_pages = -(-sp.max_new_tokens // page_size) + 2 * max_turns + seg_pages
    pools, layout, source = shard_layout(unique, unique_shard, sample_source, rows, page_size,
                                         row_pages, config.pad_token_id or 0)
    pool = pools[0]
    hidden, cache = engine.prefill_layout(config, params, pool.num_pages, layout, source)
    for row in rows.place:
        pool.retain(layout.tables[source[row]])
    for table in layout.tables[layout.rows]:
        pool.release(table)

    state = [_Row(int(layout.slots - layout.offsets[source[d]])) for d in rows.place]
    loop = _Loop(config, params, sp, rng, respond, layout, source, rows, pool, page_size,
                 segment_len, stop_ids, max_turns, max_turn_tokens, state)
    loop.run(hidden, cache)
    for d, row in zip(rows.place, state, strict=True):
        pool.release(list(layout.tables[source[d]]) + row.pages)
    if pool.used_pages:
        raise RuntimeError(f"KV page leak: {pool.used_pages} pages still in use")
    return _rollouts(state, len(prompts), n, np.int32(config.pad_token_id or 0),
                     loop.stats | {"prefill_tokens": int(sum(map(len, unique))),
                                   "kv_pages": pool.num_pages})


class _Loop:
    """The segment loop of `generate_turns` (state in `self.rows`, one per sample)."""

    def __init__(self, config, params, sp, rng, respond, layout, source, placement, pool,
                 page_size, segment_len, stop_ids, max_turns, max_turn_tokens, rows):
        self.config, self.params, self.sp, self.rng, self.respond = config, params, sp, rng, respond
        self.layout, self.source, self.placement, self.pool = layout, source, placement, pool
        self.page_size, self.segment_len, self.stop_ids = page_size, segment_len, stop_ids
        self.max_turns, self.max_turn_tokens, self.rows = max_turns, max_turn_tokens, rows
        self.device = np.asarray(placement.place)  # sample i -> device row
        self.stats = {"decode_tokens": 0, "decode_steps": 0, "decode_calls": 0,
                      "observed_tokens": 0, "extend_calls": 0, "parked_rows": 0}

    def run(self, hidden, cache) -> None:
        pending = None  # (future of the replies, the samples parked a segment ago)
        seg = 0
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="env") as env:
            while True:
                waiting = set(pending[1]) if pending else set()
                running = [i for i, row in enumerate(self.rows)
                           if row.finish is None and i not in waiting]
                parked = []
                if running:
                    parked, hidden, cache = self._decode(running, seg, hidden, cache)
                if pending:  # the replies to the turns that stopped a segment ago
                    hidden, cache = self._append(pending[1], pending[0].result(), hidden, cache)
                pending = None
                if parked:
                    ends = [TurnEnd(i, tuple(self._turn(self.rows[i]))) for i in parked]
                    pending = (env.submit(self.respond, ends), parked)
                    self.stats["parked_rows"] += len(parked)
                seg += 1
                if pending is None and all(row.finish is not None for row in self.rows):
                    return

    def _turn(self, row: _Row) -> list[int]:
        return row.tokens[len(row.tokens) - row.turn_tokens:]

    def _budget(self, row: _Row) -> int:
        return min(self.max_turn_tokens - row.turn_tokens, self.sp.max_new_tokens - len(row.tokens))

    def _tables(self, samples: Sequence[int]):
        """[S, MPo] own pages and [S, MPo, ps] their filled slots for device rows, MPo a
        power of two wide enough for every sample's pages."""
        width = engine.next_pow2(max([len(self.rows[i].pages) for i in samples] + [1]))
        tables = np.full((self.placement.rows, width), NULL_PAGE, np.int32)
        filled = np.zeros((self.placement.rows, width), np.int64)
        for i in samples:
            row, d = self.rows[i], self.device[i]
            tables[d, :len(row.pages)] = row.pages
            filled[d, :len(row.filled)] = row.filled
        return tables, np.arange(self.page_size)[None, None] < filled[..., None]

    def _decode(self, running: list[int], seg: int, hidden, cache):
        """One segment for the `running` samples; returns the samples whose turn stopped
        (to park), and the new (hidden, cache)."""
        seg_pages = self.segment_len // self.page_size
        active = np.zeros(self.placement.rows, bool)
        active[self.device[running]] = True
        fresh = np.full((self.placement.rows, seg_pages), NULL_PAGE, np.int32)
        for i in running:
            fresh[self.device[i]] = self.pool.alloc(seg_pages)
        own, valid = self._tables(running)
        pages = engine.page_rows(self.layout.tables, self.layout.offsets, self.source, own,
                                 fresh, ~self.placement.real(), 1, own_valid=valid)
        positions = np.zeros(self.placement.rows, np.int32)
        for i in running:
            positions[self.device[i]] = self.rows[i].position
        state = engine.RowState(hidden=hidden, pages=pages, positions=positions, done=~active,
                                ids=self.placement.ids())
        limit = max(self._budget(self.rows[i]) for i in running)
        out, hidden, cache = engine.decode(self.config, self.params, cache, state, self.rng, seg,
                                           np.int32(limit), self.sp, self.segment_len,
                                           self.stop_ids)
        out = engine.as_numpy(out)
        self.stats["decode_calls"] += 1
        self.stats["decode_steps"] += int(out.steps)
        parked = []
        for i in running:
            if self._take(i, out, fresh[self.device[i]]):
                parked.append(i)
        return parked, hidden, cache

    def _take(self, i: int, out, fresh: np.ndarray) -> bool:
        """Appends sample i's segment; True when its turn stopped and it goes on."""
        row, d = self.rows[i], self.device[i]
        budget = self._budget(row)
        made = int(out.num_tokens[d])
        k = min(made, budget)
        row.tokens += out.tokens[d, :k].tolist()
        row.logprobs += out.logprobs[d, :k].tolist()
        row.raw += out.raw_logprobs[d, :k].tolist()
        row.generated += [True] * k
        row.turn_tokens += k
        row.position += k
        self.stats["decode_tokens"] += k
        used = -(-k // self.page_size)
        row.pages += fresh[:used].tolist()
        row.filled += [min(self.page_size, k - j * self.page_size) for j in range(used)]
        self.pool.release(fresh[used:])
        stopped = out.finish[d] == engine.STOP and made <= budget
        if not stopped:
            if k == budget:  # a budget cut it (a turn or the episode)
                row.finish = "length"
            return False
        return True  # the environment ends it, or answers (past max_turns: cut)

    def _append(self, samples: list[int], replies, hidden, cache):
        """Appends each reply onto its sample's pages (one extend call for all)."""
        replies = list(replies)
        if len(replies) != len(samples):
            raise ValueError(f"the environment answered {len(replies)} of {len(samples)} turns")
        go = []
        for i, reply in zip(samples, replies, strict=True):
            row = self.rows[i]
            if reply is None:
                row.finish = "stop"
            elif len(reply) == 0:
                raise ValueError(f"the environment answered row {i} with no tokens (None ends "
                                 "an episode)")
            elif row.turns >= self.max_turns:
                row.finish, row.turn_limit = "length", True  # it wants another turn
            elif len(row.tokens) + len(reply) >= self.sp.max_new_tokens:
                row.finish = "length"  # no room for the reply and a token after it
            else:
                go.append((i, engine.check_prompts(self.config, [reply])[0]))
        if not go:
            return hidden, cache
        return self._extend(go, hidden, cache)

    def _extend(self, go: list[tuple[int, list[int]]], hidden, cache):
        ps = self.page_size
        b = self.placement.rows  # one row count: a compile per chunk and context width
        c = engine.next_pow2(-(-max(len(t) for _, t in go) // ps)) * ps
        prompt = self.layout.tables.shape[1]
        own, valid = self._tables([i for i, _ in go])
        slots = np.arange(prompt * ps).reshape(prompt, ps)
        tokens = np.zeros((b, c), np.int32)
        lengths = np.ones(b, np.int32)  # padding rows: one token to the null page
        positions = np.zeros(b, np.int32)
        context = np.full((b, prompt + own.shape[1]), NULL_PAGE, np.int32)
        mask = np.zeros((b, prompt + own.shape[1], ps), bool)
        pages = np.full((b, c // ps), NULL_PAGE, np.int32)
        for j, (i, reply) in enumerate(go):
            row, d = self.rows[i], self.device[i]
            src = self.source[d]
            tokens[j, :len(reply)], lengths[j], positions[j] = reply, len(reply), row.position
            context[j] = np.concatenate([self.layout.tables[src], own[d]])
            mask[j] = np.concatenate([slots >= self.layout.offsets[src], valid[d]])
            used = -(-len(reply) // ps)
            new = self.pool.alloc(used)
            pages[j, :used] = new
            row.pages += new
            row.filled += [min(ps, len(reply) - p * ps) for p in range(used)]
            row.tokens += reply
            row.logprobs += [0.0] * len(reply)
            row.raw += [0.0] * len(reply)
            row.generated += [False] * len(reply)
            row.position += len(reply)
            row.turns += 1
            row.turn_tokens = 0
            self.stats["observed_tokens"] += len(reply)
        where = np.full(b, b, np.int32)  # padding rows: out of range, dropped
        where[:len(go)] = self.device[[i for i, _ in go]]
        self.stats["extend_calls"] += 1
        return _extend(self.config, self.params, cache, hidden, where, tokens, lengths,
                       positions, context, mask, pages)


def _rollouts(rows: list[_Row], num_prompts: int, n: int, pad, stats: dict) -> Rollouts:
    r = len(rows)
    width = max([len(row.tokens) for row in rows] + [1])
    tokens = np.full((r, width), pad, np.int32)
    logprobs = np.zeros((r, width), np.float32)
    raw = np.zeros((r, width), np.float32)
    mask = np.zeros((r, width), bool)
    for i, row in enumerate(rows):
        k = len(row.tokens)
        tokens[i, :k], logprobs[i, :k], raw[i, :k] = row.tokens, row.logprobs, row.raw
        mask[i, :k] = row.generated
    return Rollouts(
        tokens=tokens, lengths=np.array([len(row.tokens) for row in rows], np.int32),
        logprobs=logprobs, raw_logprobs=raw,
        prompt_index=np.repeat(np.arange(num_prompts, dtype=np.int32), n),
        finish_reason=np.array([row.finish for row in rows]),
        stats=stats | {"turn_limit_rows": sum(row.turn_limit for row in rows)},
        loss_mask=mask, turns=np.array([row.turns for row in rows], np.int32))
