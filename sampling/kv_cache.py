"""The paged KV cache on device and the forward pass that reads and writes it.

    cache.k : [layers, num_pages, kv_heads, head_dim, page_size]  (slots last)
    cache.v : [layers, num_pages, kv_heads, page_size, head_dim]

A sequence is a page table `[max_pages]` of page ids plus two slot counters:
slots are positions in the concatenation of its pages. `offset` is the first
slot holding a real token (prompts are right-aligned so they end on a page
boundary: the G samples of a prompt, and a tree's branches, then share whole
pages and never copy KV data), and `start` is the slot the next token is
written to. A token in slot s has RoPE position s - offset.

`paged_forward` (prefill) runs whole right-aligned prompts through the one
decoder (`models.run_layers`) and writes their k/v into their pages; the
decode loop (`sampling.engine.decode`) reads the pages through tables with
`models.paged_attention.decode_attend`.
"""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp

import models
from models import paged_attention
from models.config import ModelConfig
from models.sharding import ActivationSharding
from sampling.page_pool import NULL_PAGE


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class KVCache:
    k: jax.Array  # [L, P, K, Dh, page_size]
    v: jax.Array  # [L, P, K, page_size, Dh]

    @property
    def page_size(self) -> int:
        return self.v.shape[3]

    @property
    def num_pages(self) -> int:
        return self.k.shape[1]


def init_cache(config: ModelConfig, num_pages: int, page_size: int) -> KVCache:
    lead = (config.num_layers, num_pages, config.num_kv_heads)
    dtype = config.compute_dtype
    return KVCache(jnp.zeros(lead + (config.head_dim, page_size), dtype),
                   jnp.zeros(lead + (page_size, config.head_dim), dtype))


def cache_bytes(config: ModelConfig, num_pages: int, page_size: int) -> int:
    per = config.num_layers * num_pages * page_size * config.num_kv_heads * config.head_dim
    return 2 * per * jnp.dtype(config.compute_dtype).itemsize


def paged_forward(config: ModelConfig, params: dict, cache: KVCache, tokens: jax.Array,
                  tables: jax.Array, offsets: jax.Array, active: jax.Array,
                  sharding: ActivationSharding | None = None,
                  store=paged_attention.write) -> tuple[jax.Array, KVCache]:
    """Prefill: runs prompts `tokens` [S, C] (right-aligned, the whole context)
    through the decoder, writing their k/v to slots 0 .. C - 1 of their pages.

    Args:
      tokens: [S, C] int ids.
      tables: [S, C / page_size] int32 page ids (NULL_PAGE where unused).
      offsets: [S] int32 first real slot of each sequence (RoPE position 0).
      active: [S] bool; inactive rows write to the null page only.
      sharding: optional activation sharding (rows over the batch axes).
      store: the pages' writer (`paged_attention.write`, or it run per batch shard
        when page ids are local to a shard: `sampling.engine.prefill`).

    Returns:
      (final-norm hidden states [S, C, D], updated cache).
    """
    s, c = tokens.shape
    chex.assert_shape(tables, (s, None))
    chex.assert_shape([offsets, active], (s,))
    ps = cache.page_size
    slots = jnp.broadcast_to(jnp.arange(c, dtype=jnp.int32), (s, c))
    pages = jnp.where(active[:, None], tables[:, slots[0] // ps], NULL_PAGE)
    positions = jnp.maximum(slots - offsets[:, None], 0)
    mask = ((slots[:, None, :] >= offsets[:, None, None])
            & (slots[:, None, :] <= slots[:, :, None]))                      # [S, C, C]
    attend = paged_attention.prefill_attend(pages, slots % ps, mask, store)
    x, (k, v) = models.run_layers(config, params, tokens, positions, attend, (cache.k, cache.v),
                                  scan=True, sharding=sharding)
    return x, KVCache(k, v)


def output_head(config: ModelConfig, params: dict) -> jax.Array:
    """`models.output_matrix`: the [D, V] output projection in the compute dtype."""
    return models.output_matrix(config, params)


def head_logits(head: jax.Array, h: jax.Array) -> jax.Array:
    """fp32 logits [S, V] from hidden states [S, D] and `output_head` [D, V]."""
    return jnp.dot(h, head, preferred_element_type=jnp.float32)


def extend_forward(config: ModelConfig, params: dict, cache: KVCache, tokens: jax.Array,
                   lengths: jax.Array, positions: jax.Array, context: jax.Array,
                   valid: jax.Array, pages: jax.Array) -> tuple[jax.Array, KVCache]:
    """Appends a chunk to rows that have a context in the cache: a tool's reply after
    a policy's turn, written onto the row's pages instead of re-prefilling it.

    Args:
      tokens: [B, C] int ids, left-aligned: row b's chunk is tokens[b, :lengths[b]].
      lengths: [B] int32 in [1, C].
      positions: [B] int32 RoPE position of each row's first chunk token (the row's
        tokens so far).
      context: [B, MP] int32 the pages the row's earlier tokens are in.
      valid: [B, MP, page_size] bool which of their slots hold a token.
      pages: [B, C / page_size] int32 the pages the chunk goes to (slot j: page
        j // page_size, slot j % page_size); slots past a row's length go to the null
        page.

    Returns:
      (final-norm hidden state of each row's last chunk token [B, D], cache).
    """
    b, c = tokens.shape
    chex.assert_shape([lengths, positions], (b,))
    chex.assert_shape(context, (b, None))
    chex.assert_shape(valid, (b, context.shape[1], cache.page_size))
    ps = cache.page_size
    j = jnp.arange(c, dtype=jnp.int32)
    real = j[None] < lengths[:, None]                                       # [B, C]
    where = jnp.where(real, pages[:, j // ps], NULL_PAGE)
    within = jnp.broadcast_to(j % ps, (b, c))
    mask = (j[None, None, :] <= j[None, :, None]) & real[:, None, :]       # [B, C, C]
    attend = paged_attention.extend_attend(context, valid, where, within, mask)
    x, (k, v) = models.run_layers(config, params, tokens, positions[:, None] + j[None], attend,
                                  (cache.k, cache.v), scan=True)
    return x[jnp.arange(b), lengths - 1], KVCache(k, v)
