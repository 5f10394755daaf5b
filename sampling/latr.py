"""LATR: lookahead tree-based rollouts in the flat sampler.

    rollouts = sampling.latr_generate(config, params, prompts, n=8,
                                      sampling_params=SamplingParams(temperature=1.0),
                                      rng=jax.random.key(0), latr=LatrConfig(width=8))

Of each prompt's n samples, `latr.width` grow as a tree from one greedy root: a row
whose two most likely tokens are close branches (the child takes the second token),
a branch that stays close to its parent over the lookahead points is pruned, and once
the groups are full (or after `max_steps`) every row continues with plain sampling;
the other n - width samples are drawn plainly from the start. The rules run inside
the decode loop (`sampling.latr_step`, `sampling.latr_rules`); this module is the host
side: pages, the rows' lineage across decode calls, the output.

A branch is a copy of its parent at the branch point: it shares the parent's earlier
pages by reference (a page is freed when no row references it) and copies only the
current call's keys (at most `segment_len` tokens). Rows are prompt-major; the tree
rows of a prompt come first (its root at 0), then its plain rows. A group that has
fewer than `width` rows when the phase ends is filled with copies of its root, which
then sample on their own; if the phase never ends the copies repeat the root's text.

Its phase-one tokens are chosen, not drawn: their recorded log-probs are the tokens'
under the sampling distribution (the authors' trainer recomputes old log-probs with
the policy).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from models.config import ModelConfig
from sampling import engine, flat
from sampling import shards as shards_lib
from sampling.latr_step import LatrConfig, LatrState
from sampling.latr_step import decode as latr_decode
from sampling.page_pool import NULL_PAGE
from sampling.params import SamplingParams
from sampling.rollouts import Rollouts

# the authors' math characters: a branch whose parent token at the branch point
# decodes (stripped) to a substring of this is never pruned
MATH_CORE_SYMBOLS = "+-*/\\<>=()[]{}_^&%$0123456789"


def math_symbol_tokens(decode, vocab_size: int) -> np.ndarray:
    """[V] bool: the tokens `keep_math_symbols` exempts. `decode([id]) -> str`. The
    authors test `text.strip() in MATH_CORE_SYMBOLS`, a substring test: whitespace
    tokens and runs such as "12" count, "21" does not; kept as they wrote it."""
    return np.array([decode([i]).strip() in MATH_CORE_SYMBOLS for i in range(vocab_size)])


def check(n: int, sp: SamplingParams, latr: LatrConfig, prefix: str = "",
          exempt: np.ndarray | None = None, vocab_size: int = 0) -> None:
    """LATR's rules on a call's values (ValueError naming the one broken)."""
    if exempt is not None and np.shape(exempt) != (vocab_size,):
        raise ValueError(f"exempt must be [{vocab_size}] bools (one per token), got shape "
                         f"{np.shape(exempt)}")
    if latr.width > n:
        raise ValueError(f"{prefix}latr.width ({latr.width}) must be <= {prefix}n ({n})")
    if sp.greedy:
        raise ValueError(f"LATR needs {prefix}temperature > 0: its rows sample once the tree "
                         "phase ends")


def latr_generate(config: ModelConfig, params: dict, prompts, n: int,
                  sampling_params: SamplingParams, rng: jax.Array, latr: LatrConfig, *,
                  page_size: int = flat.DEFAULT_PAGE_SIZE,
                  segment_len: int = flat.DEFAULT_SEGMENT_LEN,
                  exempt: np.ndarray | None = None) -> Rollouts:
    """`n` completions of each prompt, `latr.width` of them grown by LATR (module doc).

    `exempt` [V] bool: the tokens `keep_math_symbols` exempts (`math_symbol_tokens`);
    None exempts none. Returns Rollouts as `sampling.generate` (whose decode_tokens stat
    counts a shared prefix once per row that holds it), with stats latr/born,
    latr/pruned, latr/suppressed (branches over a group's width), latr/filled,
    latr/decoded_tokens (the row-steps decoded: a shared prefix once) and latr/end_step
    (the step the tree phase ended; -1: it ran to the end)."""
    sp = sampling_params
    flat.check_layout(n, page_size, segment_len)
    check(n, sp, latr, exempt=exempt, vocab_size=config.vocab_size)
    prompts = engine.check_prompts(config, prompts)
    r = len(prompts) * n
    rows = shards_lib.place(np.zeros(r, np.int64), 1)
    unique, unique_shard, sample_source = flat.distinct(prompts, n, True, np.zeros(
        len(prompts), np.int64))
    segment_len = min(segment_len, page_size * -(-sp.max_new_tokens // page_size))
    gen_pages = -(-sp.max_new_tokens // segment_len) * (segment_len // page_size)
    pools, layout, source = flat.shard_layout(unique, unique_shard, sample_source, rows,
                                              page_size, gen_pages, config.pad_token_id or 0)
    (pool,) = pools
    hidden, cache = engine.prefill_layout(config, params, pool.num_pages, layout, source)
    flat.hand_over_prompt_pages(pools, layout, source, rows, unique_shard)
    if exempt is None or not latr.keep_math_symbols:
        exempt = np.zeros(config.vocab_size, bool)
    stop_ids = engine.stop_token_ids(config, sp)
    tree = _init(rows.rows, len(prompts), n, latr.width, latr.history)
    run = _Run(config, params, sp, latr, stop_ids, rng, jnp.asarray(exempt),
               jnp.asarray(needed_rows(latr, len(prompts), sp.max_new_tokens)), page_size,
               segment_len)
    calls, own = run.segments(pool, layout, source, hidden, cache, tree, rows)
    out = _lineage(calls, rows.rows)
    pool.release(own[own != NULL_PAGE])
    for row in rows.place:
        pool.release(layout.tables[source[row]])
    if pool.used_pages:
        raise RuntimeError(f"KV page leak: {pool.used_pages} pages still in use")
    tree = calls[-1][2]
    out, filled = _fill_at_end(out, np.asarray(tree.tree), np.asarray(tree.alive), n, r)
    counts = np.asarray(tree.counts)
    stats = flat.call_stats((config,), unique, layout, out, len(calls), rows, pools,
                            page_size, False)
    stats |= {"latr/born": int(counts[0]), "latr/pruned": int(counts[1]),
              "latr/suppressed": int(counts[2]), "latr/filled": int(counts[3]) + filled,
              "latr/decoded_tokens": int(counts[4]),
              "latr/end_step": int(tree.end)}
    done = np.ones(r, bool)
    budget = np.full(r, sp.max_new_tokens, np.int64)
    rollouts, _ = flat.to_rollouts(engine.take_rows(out, rows.place), budget, done,
                                   len(prompts), n, sp.max_new_tokens,
                                   np.int32(config.pad_token_id or 0), stats)
    return rollouts


def needed_rows(latr: LatrConfig, prompts: int, max_new: int) -> np.ndarray:
    """[max_steps] int32: the rows that make the groups full after step t, round(width ·
    prompts · (fill_init - fill_decay · t / max_new)), in Python floats and Python's
    rounding (half to even) as the authors compute it."""
    return np.array([round(latr.width * prompts * (latr.fill_init - latr.fill_decay * t
                                                    / max_new))
                     for t in range(latr.max_steps)], np.int32)


def _init(s: int, prompts: int, n: int, width: int, history: int) -> LatrState:
    """The tree state before the first step: one root per prompt (slot 0 of its n), its
    other `width` - 1 tree slots free, its plain rows alive, padding rows in no group."""
    index = np.arange(s)
    real = index < prompts * n
    tree = real & (index % n < width)
    return LatrState(
        t=jnp.int32(0), on=jnp.bool_(True), tree=jnp.asarray(tree),
        group=jnp.asarray(np.where(real, index // n, -1).astype(np.int32)),
        alive=jnp.asarray(real & (~tree | (index % n == 0))),
        parent=jnp.full(s, -1, jnp.int32), birth=jnp.zeros(s, jnp.int32),
        order=jnp.asarray(index.astype(np.int32)),
        history=jnp.full((s, history), -1, jnp.int32),
        origin=jnp.arange(s, dtype=jnp.int32), counts=jnp.zeros(5, jnp.int32),
        end=jnp.int32(-1))


class _Run:
    """The decode calls of one `latr_generate`: the call's fixed arguments."""

    def __init__(self, config, params, sp, latr, stop_ids, rng, exempt, needed, page_size,
                 segment_len):
        self.config, self.params, self.sp, self.latr = config, params, sp, latr
        self.stop_ids, self.rng, self.exempt, self.needed = stop_ids, rng, exempt, needed
        self.page_size, self.segment_len = page_size, segment_len

    def segments(self, pool, layout, source, hidden, cache, tree: LatrState,
                 rows: shards_lib.Placement):
        """Decodes segment by segment. Returns ([(host output, origin [S], state)] per
        call, [S, pages] the rows' own pages at the end, still referenced)."""
        max_new, seg_pages = self.sp.max_new_tokens, self.segment_len // self.page_size
        real = rows.real()
        slot = np.asarray(tree.tree)
        own = np.zeros((rows.rows, 0), np.int32)
        generated = np.zeros(rows.rows, np.int64)
        stopped = np.zeros(rows.rows, bool)
        positions = layout.slots - layout.offsets[source]
        calls = []
        for seg in range(-(-max_new // self.segment_len)):
            alive = np.asarray(tree.alive)
            finished = stopped | (generated >= max_new)
            done = ~real | finished | (slot & ~alive)
            fresh = np.full((rows.rows, seg_pages), NULL_PAGE, np.int32)
            for row in np.flatnonzero(real & ~finished):  # free slots may be born
                fresh[row] = pool.alloc(seg_pages)
            pages = engine.page_rows(layout.tables, layout.offsets, source, own, fresh, ~real)
            state = engine.RowState(hidden=hidden, pages=pages, positions=positions, done=done)
            limit = int((max_new - generated)[real & ~finished].max())
            out, hidden, cache, tree = latr_decode(
                self.config, self.params, cache, state, self.rng, np.int32(seg),
                np.int32(limit), self.sp, self.segment_len, self.stop_ids, self.latr, tree,
                self.exempt, self.needed)
            out, origin = engine.as_numpy(out), np.asarray(tree.origin)
            calls.append((out, origin, tree))
            own, generated, stopped = self._follow(pool, own, fresh, origin, real, slot,
                                                   np.asarray(tree.alive), out, generated,
                                                   stopped)
            positions = positions + self.segment_len
            if np.all(~real | (slot & ~np.asarray(tree.alive)) | stopped
                      | (generated >= max_new)):
                break
        return calls, own

    @staticmethod
    def _follow(pool, own, fresh, origin, real, slot, alive, out, generated, stopped):
        """The rows after a call: each continues row origin[s]'s pages, count and stop,
        plus its own this call; a page is referenced once per row holding it."""
        holds = real & (~slot | alive)
        own_next = np.concatenate([own[origin], fresh], axis=1)
        own_next[~holds] = NULL_PAGE
        pool.retain(own_next[own_next != NULL_PAGE])
        pool.release(own[own != NULL_PAGE])
        pool.release(fresh[fresh != NULL_PAGE])
        return (own_next, generated[origin] + out.num_tokens,
                stopped[origin] | (out.finish == engine.STOP))


def _lineage(calls, s: int):
    """The calls' outputs joined per final row: row s's earlier tokens are those of the
    row it continued (`origin`), call by call backwards."""
    index = np.arange(s)
    parts = []
    for out, origin, _ in reversed(calls):
        parts.append(engine.take_rows(out, index))
        index = origin[index]
    return engine.concat_outputs(parts[::-1])


def _fill_at_end(out, tree: np.ndarray, alive: np.ndarray, n: int, r: int):
    """A group's tree slots still free at the end repeat its root (the authors' fill
    when the tree phase never ended); (output, rows filled)."""
    free = np.flatnonzero(tree[:r] & ~alive[:r])
    src = np.arange(len(out.num_tokens))
    src[free] = free // n * n
    return engine.take_rows(out, src), len(free)
