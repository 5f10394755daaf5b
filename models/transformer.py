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
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from models import layers
from models.config import ModelConfig
from models.linear import is_plain
from models.sharding import ActivationSharding, axis_names


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
                  attend: Callable, cache=None, layer=0,
                  constrain=_no_constraint) -> tuple[jax.Array, object]:
    """One pre-norm block, the only one: training, scoring, prefill and decode
    all run it. x: [B, T, D] -> ([B, T, D], cache).

    `attend(q, k, v, cache, layer) -> (out [B, T, H, Dh], cache)` is the
    attention over roped q [B, T, H, Dh], k, v [B, T, K, Dh] of layer `layer`
    (its mask lives in it): dense causal attention ignores `cache`; the
    sampler's page attention writes k/v into the page pool `cache` and reads
    the pool through page tables (`models.paged_attention`). `p` may hold
    fused q|k|v and gate|up weights (`fuse_layers`)."""
    h = layers.rms_norm(x, p["attn_norm"], config.rms_norm_eps)
    q, k, v = layers.qkv_projection(config, p, h, cos, sin)
    q = constrain(q, ("batch", "length", "heads", "head_dim"))
    attn, cache = attend(q, k, v, cache, layer)
    x = x + constrain(layers.output_projection(config, p, attn), ("batch", "length", "embed"))
    h = layers.rms_norm(x, p["mlp_norm"], config.rms_norm_eps)
    return x + constrain(layers.mlp(config, p, h), ("batch", "length", "embed")), cache


def dense_attention(mask: jax.Array) -> Callable:
    """The `attend` of a dense sequence under `mask` [B, T, T] (causal, see
    `causal_mask`): `layers.causal_attention`, no cache."""
    def attend(q, k, v, cache, layer):
        del layer
        return layers.causal_attention(q, k, v, mask), cache
    return attend


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
    return layer_stack(config, params, tokens, positions, dense_attention(mask), sharding)


def layer_stack(config: ModelConfig, params: dict, tokens: jax.Array, positions: jax.Array,
                attend: Callable, sharding: ActivationSharding | None = None) -> jax.Array:
    """`run_layers` without a cache, rematerialised per `config.remat`:
    tokens/positions [B, T] -> final-norm hidden states [B, T, D]."""
    x, _ = run_layers(config, params, tokens, positions, attend, None, sharding=sharding,
                      remat=config.remat)
    return x


def run_layers(config: ModelConfig, params: dict, tokens: jax.Array, positions: jax.Array,
               attend: Callable, cache=None, *, sharding: ActivationSharding | None = None,
               remat: str = "none", scan: bool | None = None) -> tuple[jax.Array, object]:
    """Embedding, the decoder layers and the final norm: tokens/positions
    [B, T] -> (final-norm hidden states [B, T, D], cache).

    `attend` is every layer's attention (see `decoder_layer`); `cache` is
    threaded through the layers (the sampler's page pool). Layers run under
    `lax.scan` (layer index traced) when `scan` (default `config.scan_layers`),
    else unrolled (python int index). `params["layers"]` may be fused
    (`fuse_layers`), and when unrolled may be a list of per-layer trees (`layer_list`)."""
    constrain = sharding.constrain if sharding is not None else _no_constraint
    dtype = config.compute_dtype
    x = constrain(embed_tokens(params["embed"], tokens, sharding).astype(dtype),
                  ("batch", "length", "embed"))
    cos, sin = layers.rope_tables(config, positions)

    def block(p, x, cache, index):
        return decoder_layer(config, p, x, cos, sin, attend, cache, index, constrain)

    layer = _remat(block, remat)
    scan = config.scan_layers if scan is None else scan
    if scan:
        def body(carry, inputs):
            x, cache = carry
            p, index = inputs
            return layer(p, x, cache, index), None

        indices = jnp.arange(config.num_layers, dtype=jnp.int32)
        (x, cache), _ = jax.lax.scan(body, (x, cache), (params["layers"], indices))
    else:
        for i, p in enumerate(layer_list(params["layers"])):
            x, cache = layer(p, x, cache, i)
    return layers.rms_norm(x, params["final_norm"], config.rms_norm_eps), cache


def layer_list(stacked) -> list:
    """The per-layer trees of a stacked [L, ...] layer tree (a list passes through). A
    loop that runs the unrolled layers many times (the sampler's decode) slices them
    once outside it: sliced inside, XLA:CPU copied each layer's weights every step."""
    if isinstance(stacked, list):
        return stacked
    count = jax.tree.leaves(stacked)[0].shape[0]
    return [jax.tree.map(lambda a, i=i: a[i], stacked) for i in range(count)]


def embed_tokens(table: jax.Array, tokens: jax.Array,
                 sharding: ActivationSharding | None = None) -> jax.Array:
    """Rows of the embedding table [V, D] for tokens [B, T] -> [B, T, D], without
    gathering the table.

    Where the rules split the table's `embed` dim (FSDP), every device looks up its own
    D shard for the tokens of the batch shards those mesh axes do not split (the token
    ids are gathered over them: [B, T] int32), and the caller's constraint to the batch
    layout moves the [B, T, D] rows with one all-to-all. Gathering the table instead
    costs a whole [V, D] per device (1 GiB for a 152k × 3584 bf16 table) plus, with
    vocab whole, XLA's relayout copy of it, live through prefill and decode; left to
    itself (a bare `take`), GSPMD replicates and repartitions on a 2×2×2 mesh (its
    "involuntary full rematerialization"). A `vocab` split (`tensor`) stays: XLA masks
    the rows each vocab shard lacks and sums over `tensor`, exactly."""
    if sharding is None:
        return jnp.take(table, tokens, axis=0)
    spec = sharding.spec(("vocab", "embed"), table.shape)
    split = axis_names(spec[1]) if len(spec) > 1 else ()
    if not split:
        return jnp.take(sharding.constrain(table, ("vocab", None)), tokens, axis=0)
    batch = tuple(a for a in axis_names(sharding.spec(("batch",), tokens.shape[:1])[0])
                  if a not in split)
    rows = P(batch or None, None)
    tokens = jax.lax.with_sharding_constraint(tokens, NamedSharding(sharding.mesh, rows))
    x = jnp.take(table, tokens, axis=0)
    return jax.lax.with_sharding_constraint(
        x, NamedSharding(sharding.mesh, P(*rows, split if len(split) > 1 else split[0])))


def fuse_layers(config: ModelConfig, stacked: dict) -> dict:
    """Stacked layer params with q|k|v and gate|up concatenated into "qkv"
    [L, D, (H+2K)·Dh] and "gate_up" [L, D, 2F] (and "qkv_bias"), in the
    compute dtype: fewer, larger matmuls when few rows run (decode). Built
    once per decode call, outside its loop; `decoder_layer` accepts either form.
    A group with a quantized or adapted weight stays unfused (`models.linear`: it
    is dequantized per layer inside the scan, never whole)."""
    dtype = config.compute_dtype
    n, d = config.num_layers, config.hidden_size
    fuse_qkv = all(is_plain(stacked[name]) for name in "qkv")
    fuse_mlp = is_plain(stacked["gate"]) and is_plain(stacked["up"])
    drop = (("q", "k", "v", "q_bias", "k_bias", "v_bias") if fuse_qkv else ()) + (
        ("gate", "up") if fuse_mlp else ())
    fused = {k: v for k, v in stacked.items() if k not in drop}
    if fuse_qkv:
        fused["qkv"] = jnp.concatenate(
            [stacked[name].astype(dtype).reshape(n, d, -1) for name in "qkv"], axis=2)
        if config.qkv_bias:
            fused["qkv_bias"] = jnp.concatenate(
                [stacked[f"{name}_bias"].astype(dtype).reshape(n, -1) for name in "qkv"],
                axis=1)
    if fuse_mlp:
        fused["gate_up"] = jnp.concatenate([stacked["gate"], stacked["up"]],
                                           axis=2).astype(dtype)
    return fused


def output_matrix(config: ModelConfig, params: dict) -> jax.Array:
    """The output projection as a [D, V] matrix in the compute dtype (the tied
    embedding transposed): built once per decode call, so every step's logits
    are a plain [S, D] x [D, V] product (XLA:CPU ran the transposed-operand
    form ~3x slower at decode's row counts)."""
    w = params["embed"].T if config.tie_embeddings else params["lm_head"]
    return w.astype(config.compute_dtype)


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
