"""Numerics of one decoder layer: RMSNorm, RoPE, grouped-query attention, SwiGLU.

Every function here is pure and shape-polymorphic in the batch dims. The
numerics follow Hugging Face `transformers` (the parity tests hold them to
1e-4 in fp32): RMSNorm and softmax run in fp32, RoPE frequencies are computed
in fp32 from integer exponents, and q/k RMSNorm (Qwen3) is applied per head
before RoPE.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from models.config import ModelConfig
from models.linear import project

NEG_INF = -1e30


def rms_norm(x: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
    """RMSNorm over the last axis. x: [..., D], scale: [D]; returns x.dtype."""
    dtype = x.dtype
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return scale.astype(dtype) * x32.astype(dtype)


def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    """Inverse RoPE frequencies [Dh/2] (fp32), with the configured scaling."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (np.arange(0, dim, 2, dtype=np.int64)
                                            .astype(np.float32) / dim))
    inv_freq = inv_freq.astype(np.float32)
    s = config.rope_scaling
    if s is None or s.rope_type == "default":
        return inv_freq
    if s.rope_type == "linear":
        return (inv_freq / s.factor).astype(np.float32)
    # llama3: keep high frequencies, divide low ones, interpolate in between.
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    smooth = ((s.original_max_position_embeddings / wavelen - s.low_freq_factor)
              / (s.high_freq_factor - s.low_freq_factor))
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def rope_tables(config: ModelConfig, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """cos, sin tables [B, T, Dh] (fp32) for integer positions [B, T]."""
    inv_freq = jnp.asarray(rope_inv_freq(config))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq  # [B, T, Dh/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate-half RoPE. x: [B, T, N, Dh]; cos/sin: [B, T, Dh]."""
    dtype = x.dtype
    cos = cos[:, :, None, :].astype(dtype)
    sin = sin[:, :, None, :].astype(dtype)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def qkv_projection(config: ModelConfig, p: dict, x: jax.Array, cos: jax.Array,
                   sin: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Projects normalised hidden states to roped q [B,T,H,Dh], k, v [B,T,K,Dh].
    Takes separate q/k/v weights (plain, quantized or adapted: `models.linear`) or
    one fused "qkv" [D, (H+2K)·Dh] matrix (`models.transformer.fuse_layers`)."""
    dtype = config.compute_dtype
    if "qkv" in p:
        heads, kv, dh = config.num_heads, config.num_kv_heads, config.head_dim
        qkv = jnp.einsum("btd,de->bte", x, p["qkv"].astype(dtype))
        if config.qkv_bias:
            qkv = qkv + p["qkv_bias"].astype(dtype)
        b, t = qkv.shape[:2]
        q = qkv[..., :heads * dh].reshape(b, t, heads, dh)
        k = qkv[..., heads * dh:(heads + kv) * dh].reshape(b, t, kv, dh)
        v = qkv[..., (heads + kv) * dh:].reshape(b, t, kv, dh)
        return norm_and_rope_qk(config, p, q, k, cos, sin) + (v,)
    q = project(x, p["q"], "btd,dhk->bthk", dtype)
    k = project(x, p["k"], "btd,dhk->bthk", dtype)
    v = project(x, p["v"], "btd,dhk->bthk", dtype)
    if config.qkv_bias:
        q = q + p["q_bias"].astype(dtype)
        k = k + p["k_bias"].astype(dtype)
        v = v + p["v_bias"].astype(dtype)
    return norm_and_rope_qk(config, p, q, k, cos, sin) + (v,)


def norm_and_rope_qk(config: ModelConfig, p: dict, q: jax.Array, k: jax.Array, cos: jax.Array,
                     sin: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-head q/k RMSNorm (Qwen3) then RoPE, on projected q [B,T,H,Dh], k [B,T,K,Dh]."""
    if config.qk_norm:
        q = rms_norm(q, p["q_norm"], config.rms_norm_eps)
        k = rms_norm(k, p["k_norm"], config.rms_norm_eps)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


ATTENTION_BLOCK = 128
MAX_ATTENTION_BLOCKS = 16  # bounds the unrolled block count (compile time) at long T


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Grouped-query attention without repeating k/v.

    q: [B, T, H, Dh]; k, v: [B, S, K, Dh]; mask: bool [B, T, S] (True = may
    attend). Returns [B, T, H, Dh] in q.dtype. Scores, softmax and the
    probability-weighted sum of values run in fp32 (the sampler's page
    attention does the same, so a bf16 policy samples with the log-probs the
    learner recomputes; docs/sampling.md). A row
    with nothing to attend to (padding) returns an average of v: meaningless,
    so callers must ignore padded positions.
    """
    b, t, h, dh = q.shape
    kv = k.shape[2]
    # Heads-major layout makes both products plain batched matmuls over
    # [B, K] (measured ~2x faster on XLA:CPU than contracting in place).
    qg = q.reshape(b, t, kv, h // kv, dh).transpose(0, 2, 3, 1, 4)  # [B, K, G, T, Dh]
    kt = k.transpose(0, 2, 1, 3)  # [B, K, S, Dh]
    vt = v.transpose(0, 2, 1, 3)
    scores = jnp.einsum("bkgtd,bksd->bkgts", qg, kt, preferred_element_type=jnp.float32)
    scores = jnp.where(mask[:, None, None, :, :], scores * (dh ** -0.5), NEG_INF)
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bkgts,bksd->bkgtd", probs, vt.astype(jnp.float32),
                     preferred_element_type=jnp.float32).astype(q.dtype)
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, h, dh)


def causal_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                     block: int = ATTENTION_BLOCK) -> jax.Array:
    """`attention` for self-attention under a causal mask, skipping future blocks.

    Queries are split into blocks of `block` rows; block i only scores keys
    `[0, end_i)`, so the masked upper triangle is never computed (about half
    the FLOPs and far less softmax traffic at long T). Blocks grow beyond
    `block` when T needs more than MAX_ATTENTION_BLOCKS of them. Shapes as
    `attention` with S == T; `mask` must already be causal (it may add segment
    structure).
    """
    t = q.shape[1]
    block = max(block, -(-t // MAX_ATTENTION_BLOCKS))
    if t <= block:
        return attention(q, k, v, mask)
    outs = []
    for start in range(0, t, block):
        end = min(start + block, t)
        outs.append(attention(q[:, start:end], k[:, :end], v[:, :end], mask[:, start:end, :end]))
    return jnp.concatenate(outs, axis=1)


def output_projection(config: ModelConfig, p: dict, attn: jax.Array) -> jax.Array:
    """attn [B, T, H, Dh] -> [B, T, D]."""
    return project(attn, p["o"], "bthk,hkd->btd", config.compute_dtype)


@jax.custom_vjp
def silu(x: jax.Array) -> jax.Array:
    """x·σ(x), with a VJP that reuses the forward's σ(x) (XLA:CPU otherwise
    recomputes the sigmoid in the backward pass, which cost more than the MLP's
    matmuls on the W1 workload)."""
    return x * jax.nn.sigmoid(x)


def _silu_fwd(x):
    s = jax.nn.sigmoid(x)
    return x * s, (x, s)


def _silu_bwd(residuals, g):
    x, s = residuals
    return (g * (s * (1 + x * (1 - s))),)


silu.defvjp(_silu_fwd, _silu_bwd)


def mlp(config: ModelConfig, p: dict, x: jax.Array) -> jax.Array:
    """SwiGLU: down(silu(gate x) * up x). x: [B, T, D] -> [B, T, D]. Takes
    separate gate/up weights or one fused "gate_up" [D, 2F] matrix.

    Runs on [B·T, D] rows: plain 2-D matmuls, whose gradients XLA:CPU emits as
    single GEMMs (the 3-D einsum form measured twice as slow backward)."""
    dtype = config.compute_dtype
    rows = x.reshape(-1, x.shape[-1])
    if "gate_up" in p:
        gate, up = jnp.split(rows @ p["gate_up"].astype(dtype), 2, axis=-1)
    else:
        gate = project(rows, p["gate"], "nd,df->nf", dtype)
        up = project(rows, p["up"], "nd,df->nf", dtype)
    return project(silu(gate) * up, p["down"], "nf,fd->nd", dtype).reshape(x.shape)
