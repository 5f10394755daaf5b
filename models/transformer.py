"""The decoder-only transformer as pure functions of a parameter pytree.

`apply(config, params, tokens, positions)` is the stable public forward pass.
It is jit-able with `config` static (the dataclass is hashable):

    fwd = jax.jit(models.apply, static_argnums=0)
    logits = fwd(config, params, tokens)            # [B, T, V] fp32

Sharded execution needs nothing special: place the params with
`models.sharding.shard_params` and the batch along `batch`; pass
`sharding=models.sharding.ActivationSharding(mesh, rules)` to also pin the
activations' layout (batch over `data`/`fsdp`) instead of leaving it to GSPMD
propagation.
"""

from __future__ import annotations

from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp

from models import layers
from models.config import ModelConfig
from models.sharding import ActivationSharding


def _no_constraint(x, axes):
    del axes
    return x


def causal_mask(tokens_len: int, segment_ids: jax.Array | None, batch: int) -> jax.Array:
    """Bool mask [B, T, T]: causal, and within one non-zero segment if given."""
    t = jnp.arange(tokens_len)
    mask = (t[:, None] >= t[None, :])[None]
    if segment_ids is None:
        return jnp.broadcast_to(mask, (batch, tokens_len, tokens_len))
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    real = (segment_ids != 0)[:, :, None]
    return mask & same & real


def decoder_layer(config: ModelConfig, p: dict, x: jax.Array, cos: jax.Array, sin: jax.Array,
                  attend: Callable, constrain=_no_constraint) -> jax.Array:
    """One pre-norm block. x: [B, T, D] -> [B, T, D]; `attend(q, k, v)` is the
    attention over roped q [B, T, H, Dh], k, v [B, T, K, Dh] (its mask lives in it)."""
    h = layers.rms_norm(x, p["attn_norm"], config.rms_norm_eps)
    q, k, v = layers.qkv_projection(config, p, h, cos, sin)
    q = constrain(q, ("batch", "length", "heads", "head_dim"))
    attn = attend(q, k, v)
    x = x + constrain(layers.output_projection(config, p, attn), ("batch", "length", "embed"))
    h = layers.rms_norm(x, p["mlp_norm"], config.rms_norm_eps)
    return x + constrain(layers.mlp(config, p, h), ("batch", "length", "embed"))


def _remat(fn, policy: str):
    if policy == "none":
        return fn
    if policy == "full":
        return jax.checkpoint(fn)
    return jax.checkpoint(fn, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)


def hidden_states(config: ModelConfig, params: dict, tokens: jax.Array,
                  positions: jax.Array | None = None, *, segment_ids: jax.Array | None = None,
                  sharding: ActivationSharding | None = None) -> jax.Array:
    """Final-norm hidden states [B, T, D] in the compute dtype (see `apply`)."""
    chex.assert_rank(tokens, 2)
    b, t = tokens.shape
    if positions is None:
        positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    chex.assert_shape(positions, (b, t))
    if segment_ids is not None:
        chex.assert_shape(segment_ids, (b, t))
    mask = causal_mask(t, segment_ids, b)
    return layer_stack(config, params, tokens, positions,
                       lambda q, k, v: layers.causal_attention(q, k, v, mask), sharding)


def layer_stack(config: ModelConfig, params: dict, tokens: jax.Array, positions: jax.Array,
                attend: Callable, sharding: ActivationSharding | None = None) -> jax.Array:
    """Embedding, the decoder layers (scanned or unrolled, rematerialised per
    `config.remat`) and the final norm: tokens/positions [B, T] -> [B, T, D].
    `attend(q, k, v)` is every layer's attention (see `decoder_layer`)."""
    constrain = sharding.constrain if sharding is not None else _no_constraint
    dtype = config.compute_dtype
    # FSDP semantics: gather the table's `embed` shards at use (vocab may stay
    # split over `tensor`), so the lookup lands directly in the batch layout.
    table = constrain(params["embed"], ("vocab", None))
    x = jnp.take(table, tokens, axis=0).astype(dtype)
    x = constrain(x, ("batch", "length", "embed"))
    cos, sin = layers.rope_tables(config, positions)

    def block(p, x):
        return decoder_layer(config, p, x, cos, sin, attend, constrain)

    layer = _remat(block, config.remat)
    if config.scan_layers:
        x, _ = jax.lax.scan(lambda carry, p: (layer(p, carry), None), x, params["layers"])
    else:
        for i in range(config.num_layers):
            x = layer(jax.tree.map(lambda a, i=i: a[i], params["layers"]), x)
    return layers.rms_norm(x, params["final_norm"], config.rms_norm_eps)


def logits_from_hidden(config: ModelConfig, params: dict, x: jax.Array) -> jax.Array:
    """Output projection [B, T, D] -> fp32 logits [B, T, V]."""
    if config.tie_embeddings:
        w = params["embed"].astype(x.dtype)
        return jnp.einsum("btd,vd->btv", x, w, preferred_element_type=jnp.float32)
    w = params["lm_head"].astype(x.dtype)
    return jnp.einsum("btd,dv->btv", x, w, preferred_element_type=jnp.float32)


def apply(config: ModelConfig, params: dict, tokens: jax.Array,
          positions: jax.Array | None = None, *, segment_ids: jax.Array | None = None,
          sharding: ActivationSharding | None = None) -> jax.Array:
    """Forward pass: token ids [B, T] -> fp32 logits [B, T, V].

    Args:
      config: the architecture (static under jit).
      params: pytree from `models.init` or `models.load_pretrained`.
      tokens: int token ids [B, T].
      positions: int RoPE positions [B, T]; defaults to `arange(T)` per row
        (pass explicit positions for left-padded rows).
      segment_ids: optional int [B, T]; a token attends only to earlier tokens
        of the same non-zero segment (packing and padding; 0 = padding, whose
        outputs are meaningless).
      sharding: optional activation-sharding constraints.
    """
    x = hidden_states(config, params, tokens, positions, segment_ids=segment_ids,
                      sharding=sharding)
    logits = logits_from_hidden(config, params, x)
    if sharding is not None:
        logits = sharding.constrain(logits, ("batch", "length", "vocab"))
    return logits
