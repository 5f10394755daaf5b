"""Host-side layout of a sampler call: prompts in pages, rows in groups, buckets.

`layout_prompts` right-aligns prompts in freshly allocated pages; `page_rows`
groups the rows of a decode call by the prefix pages they share
(`models.paged_attention.PageRows`); `row_bucket` and `prompt_bucket` round
shapes so a run compiles each program once per bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from models.config import ModelConfig
from models.paged_attention import PageRows
from sampling.page_pool import NULL_PAGE, PagePool


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def row_bucket(n: int) -> int:
    """Rows (or groups) padded for a compiled shape: a power of two up to 8,
    then a multiple of 1/8 of the next power of two (at most 1/8 padding, 8
    shapes per doubling; whole powers of two wasted up to half the rows of a
    tree round)."""
    if n <= 8:
        return next_pow2(n)
    step = next_pow2(n) // 8
    return -(-n // step) * step


# Relative cost of reading one shared key slot (a page gather, on XLA:CPU ~5x
# its product) against scoring it for one padded query row: the group width R
# is chosen to minimise groups × (R + READ_COST) (`page_rows`).
READ_COST = 4


def prompt_bucket(length: int, page_size: int) -> int:
    """Prompt slots: a power-of-two number of pages covering `length`."""
    return page_size * next_pow2(-(-length // page_size))


def page_rows(group_tables: np.ndarray, group_offsets: np.ndarray, row_group: np.ndarray,
              own_tables: np.ndarray, segment_tables: np.ndarray,
              padding: np.ndarray, shards: int = 1,
              own_valid: np.ndarray | None = None) -> PageRows:
    """Host-side `PageRows` from each row's group (`row_group` [S], indexing
    `group_tables` [G, MPs] / `group_offsets` [G]), earlier own pages and
    this call's pages; `padding` rows [S] belong to no group.

    The batched group product pads every group to R rows, so a group larger
    than R is split into chunks of at most R that read the same pages. R (a
    power of two) minimises the padded work: `row_bucket(chunks)` × (R +
    READ_COST) (a wide R pads the small groups; a narrow one re-reads the
    shared pages per chunk).

    With `shards` > 1 the rows are D equal blocks, one per batch shard
    (`sampling.shards`), each of whose groups has all its rows in the block: the
    chunks are laid out in D equal blocks too and `group_rows` / `row_group` hold
    indices local to the block (what each shard's program indexes). `own_valid`
    [S, MPo, page_size] bool: the own slots that hold a token (None: all)."""
    s = len(row_group)
    per = s // shards
    members = [{} for _ in range(shards)]  # per block: group -> its rows (local)
    for row in np.flatnonzero(~padding):
        members[row // per].setdefault(int(row_group[row]), []).append(row % per)
    largest = max([len(m) for block in members for m in block.values()] + [1])

    def chunks(width):
        return [[(g, rows[i:i + width]) for g, rows in sorted(block.items())
                 for i in range(0, len(rows), width)] or [(0, [])] for block in members]

    def cost(width):
        return row_bucket(max(map(len, chunks(width)))) * (width + READ_COST)

    widths = [1 << i for i in range(next_pow2(largest).bit_length())]
    width = min(widths, key=lambda w: (cost(w), -w))
    parts = chunks(width)
    count = row_bucket(max(map(len, parts)))
    tables = np.zeros((shards * count, group_tables.shape[1]), np.int32)
    offsets = np.zeros(shards * count, np.int32)
    group_rows = np.zeros((shards * count, width), np.int32)
    chunk_of = np.zeros(s, np.int32)
    row_slot = np.zeros(s, np.int32)
    for d, block in enumerate(parts):
        for c, (g, rows) in enumerate(block):
            tables[d * count + c], offsets[d * count + c] = group_tables[g], group_offsets[g]
            group_rows[d * count + c, :len(rows)] = rows
            chunk_of[d * per + np.asarray(rows, np.int64)] = c
            row_slot[d * per + np.asarray(rows, np.int64)] = np.arange(len(rows))
    return PageRows(group_tables=tables, group_offsets=offsets, group_rows=group_rows,
                    row_group=chunk_of, row_slot=row_slot,
                    own_tables=(np.asarray(own_tables, np.int32) if own_tables.shape[1]
                                else None),
                    segment_tables=np.asarray(segment_tables, np.int32),
                    own_valid=(np.asarray(own_valid, bool) if own_valid is not None
                               and own_tables.shape[1] else None))


def check_prompts(config: ModelConfig, prompts) -> list[list[int]]:
    """Prompts as lists of ints; ValueError naming the first bad one."""
    if len(prompts) == 0:
        raise ValueError("no prompts given")
    out = []
    for i, prompt in enumerate(prompts):
        ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError(f"prompt {i} is empty")
        bad = [t for t in ids if not 0 <= t < config.vocab_size]
        if bad:
            raise ValueError(
                f"prompt {i} has token ids outside [0, {config.vocab_size}): {bad[:5]}")
        out.append(ids)
    return out


class PromptLayout(NamedTuple):
    """Right-aligned prompts in their pages, ready for `prefill` (host arrays)."""

    tables: np.ndarray   # [B_bucket, pages] int32 page ids, one reference per prompt
    tokens: np.ndarray   # [B_bucket, slots] int32
    offsets: np.ndarray  # [B_bucket] int32 first real slot
    active: np.ndarray   # [B_bucket] bool real prompts
    slots: int
    rows: np.ndarray     # [B] the row of each prompt (i with one shard)


def layout_prompts(pools: Sequence[PagePool], prompts: list[list[int]], page_size: int,
                   pad_id: int, shard_of: np.ndarray) -> PromptLayout:
    """Allocates pages for right-aligned prompts. Prompt rows are bucketed to
    a power of two and slots to a power-of-two number of pages
    (`prompt_bucket`). One layout can be prefilled into several caches.

    One pool per batch shard (D pools; one without a mesh), `shard_of` [B] the shard of
    each prompt (`sampling.shards.assign`): the rows are D equal blocks of a power of
    two each, prompt p in block `shard_of[p]` with pages of that shard's pool (local
    ids); `rows[p]` is its row."""
    shard_of = np.asarray(shard_of)
    on = [np.flatnonzero(shard_of == d) for d in range(len(pools))]
    per = next_pow2(max(map(len, on)))
    rows_b = len(pools) * per
    slots = prompt_bucket(max(map(len, prompts)), page_size)
    pages = slots // page_size
    tables = np.full((rows_b, pages), NULL_PAGE, np.int32)
    tokens = np.full((rows_b, slots), pad_id, np.int32)
    offsets = np.full(rows_b, slots - 1, np.int32)
    rows = np.zeros(len(prompts), np.int32)
    for d, which in enumerate(on):
        rows[which] = d * per + np.arange(len(which))
    for i, prompt in enumerate(prompts):
        used = -(-len(prompt) // page_size)
        tables[rows[i], pages - used:] = pools[shard_of[i]].alloc(used)
        tokens[rows[i], slots - len(prompt):] = prompt
        offsets[rows[i]] = slots - len(prompt)
    active = np.zeros(rows_b, bool)
    active[rows] = True
    return PromptLayout(tables, tokens, offsets, active, slots, rows)
