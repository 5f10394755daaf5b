"""The paged KV cache on device and the forward pass that reads and writes it.

    cache.k, cache.v : [layers, num_pages, page_size, kv_heads, head_dim]

A sequence is a page table `[max_pages]` of page ids plus two slot counters:
slots are positions in the concatenation of its pages. `offset` is the first
slot holding a real token (prompts are right-aligned so they end on a page
boundary: the G samples of a prompt, and a tree's branches, then share whole
pages and never copy KV data), and `start` is the slot the next token is
written to. A token in slot s has RoPE position s - offset.

`paged_forward` runs C new tokens per sequence (prefill: C = prompt bucket):
it writes their k/v into the pages and attends over every slot in
[offset, own slot], gathering pages by table (the portable XLA path; a
Pallas paged-attention kernel can replace the gather behind the same
signature). The decode loop (`sampling.engine.decode`) gathers a row's
pages once per call instead of once per token.
"""

from __future__ import annotations

import dataclasses

import chex
import jax
import jax.numpy as jnp

from models import layers
from models.config import ModelConfig
from sampling.page_pool import NULL_PAGE


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class KVCache:
    k: jax.Array  # [L, P, page_size, K, Dh]
    v: jax.Array

    @property
    def page_size(self) -> int:
        return self.k.shape[2]

    @property
    def num_pages(self) -> int:
        return self.k.shape[1]


def init_cache(config: ModelConfig, num_pages: int, page_size: int) -> KVCache:
    shape = (config.num_layers, num_pages, page_size, config.num_kv_heads, config.head_dim)
    return KVCache(jnp.zeros(shape, config.compute_dtype), jnp.zeros(shape, config.compute_dtype))


def cache_bytes(config: ModelConfig, num_pages: int, page_size: int) -> int:
    per = config.num_layers * num_pages * page_size * config.num_kv_heads * config.head_dim
    return 2 * per * jnp.dtype(config.compute_dtype).itemsize


def paged_forward(config: ModelConfig, params: dict, cache: KVCache, tokens: jax.Array,
                  tables: jax.Array, starts: jax.Array, offsets: jax.Array,
                  active: jax.Array) -> tuple[jax.Array, KVCache]:
    """Runs `tokens` [S, C] through the decoder against the paged cache.

    Args:
      tokens: [S, C] int ids, written to slots starts[s] .. starts[s] + C - 1.
      tables: [S, MP] int32 page ids (NULL_PAGE where unused).
      starts: [S] int32 first slot written by this call.
      offsets: [S] int32 first real slot of each sequence (RoPE position 0).
      active: [S] bool; inactive rows write to the null page only.

    Returns:
      (final-norm hidden states [S, C, D], updated cache).
    """
    s, c = tokens.shape
    chex.assert_shape(tables, (s, None))
    chex.assert_shape([starts, offsets, active], (s,))
    ps = cache.page_size
    total = tables.shape[1] * ps
    slots = starts[:, None] + jnp.arange(c, dtype=jnp.int32)[None]            # [S, C]
    pages = jnp.take_along_axis(tables, jnp.clip(slots // ps, 0, tables.shape[1] - 1), axis=1)
    pages = jnp.where(active[:, None] & (slots < total), pages, NULL_PAGE)
    within = slots % ps
    positions = jnp.maximum(slots - offsets[:, None], 0)
    cos, sin = layers.rope_tables(config, positions)
    key_slots = jnp.arange(total, dtype=jnp.int32)
    mask = ((key_slots[None, None, :] >= offsets[:, None, None])
            & (key_slots[None, None, :] <= slots[:, :, None]))                 # [S, C, T]

    dtype = config.compute_dtype
    x = jnp.take(params["embed"], tokens, axis=0).astype(dtype)

    def layer(carry, inputs):
        x, k_pool, v_pool = carry
        p, index = inputs
        h = layers.rms_norm(x, p["attn_norm"], config.rms_norm_eps)
        q, k, v = layers.qkv_projection(config, p, h, cos, sin)
        k_pool = k_pool.at[index, pages, within].set(k.astype(k_pool.dtype))
        v_pool = v_pool.at[index, pages, within].set(v.astype(v_pool.dtype))
        keys = k_pool[index][tables].reshape(s, total, *k_pool.shape[3:])
        values = v_pool[index][tables].reshape(s, total, *v_pool.shape[3:])
        attn = layers.attention(q, keys, values, mask)
        x = x + layers.output_projection(config, p, attn)
        h = layers.rms_norm(x, p["mlp_norm"], config.rms_norm_eps)
        return (x + layers.mlp(config, p, h), k_pool, v_pool), None

    indices = jnp.arange(config.num_layers, dtype=jnp.int32)
    (x, k_pool, v_pool), _ = jax.lax.scan(layer, (x, cache.k, cache.v),
                                          (params["layers"], indices))
    x = layers.rms_norm(x, params["final_norm"], config.rms_norm_eps)
    return x, KVCache(k_pool, v_pool)


def output_head(config: ModelConfig, params: dict) -> jax.Array:
    """The output projection as a [D, V] matrix in the compute dtype (the tied
    embedding transposed): built once per decode call, so every step's logits
    are a plain [S, D] x [D, V] product (XLA:CPU ran the transposed-operand
    form ~3x slower at decode's row counts)."""
    w = params["embed"].T if config.tie_embeddings else params["lm_head"]
    return w.astype(config.compute_dtype)


def head_logits(head: jax.Array, h: jax.Array) -> jax.Array:
    """fp32 logits [S, V] from hidden states [S, D] and `output_head` [D, V]."""
    return jnp.dot(h, head, preferred_element_type=jnp.float32)
