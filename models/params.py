"""Parameter layout: one table gives every tensor's shape, logical axes and init.

The parameter pytree is a nested dict of arrays. Per-layer tensors are stacked
along a leading `layers` axis so the decoder can `lax.scan` over them and so a
KV cache can be laid out `[layers, ...]` as well:

    embed       [V, D]                ('vocab', 'embed')
    layers/
      attn_norm [L, D]                ('layers', 'norm')
      q         [L, D, H, Dh]         ('layers', 'embed', 'heads', 'head_dim')
      k, v      [L, D, K, Dh]         ('layers', 'embed', 'kv_heads', 'head_dim')
      q_bias    [L, H, Dh]            qwen2 only
      k_bias, v_bias [L, K, Dh]       qwen2 only
      q_norm, k_norm [L, Dh]          qwen3 only
      o         [L, H, Dh, D]         ('layers', 'heads', 'head_dim', 'embed')
      mlp_norm  [L, D]
      gate, up  [L, D, F]             ('layers', 'embed', 'mlp')
      down      [L, F, D]             ('layers', 'mlp', 'embed')
    final_norm  [D]
    lm_head     [D, V]                untied only

`param_specs` is the single source of truth: `init` samples from it,
`param_axes` gives the logical axis names that `models.sharding` maps to the
mesh, and the Hugging Face loader validates shapes against it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from models.config import ModelConfig

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """Shape, logical axis names and initialiser of one parameter tensor.

    `init` is `"ones"`, `"zeros"` or `"normal"`; normal weights use std
    `1/sqrt(fan_in)` where `fan_in` is the product of `shape[fan_in_axes]`.
    """

    shape: tuple[int, ...]
    axes: tuple[str, ...]
    init: str = "normal"
    fan_in_axes: tuple[int, ...] = ()

    def __post_init__(self):
        assert len(self.shape) == len(self.axes), (self.shape, self.axes)


def param_specs(config: ModelConfig) -> Params:
    """Returns the nested dict of `ParamSpec` describing `config`'s parameters."""
    c = config
    L, D, V, F = c.num_layers, c.hidden_size, c.vocab_size, c.mlp_dim
    H, K, Dh = c.num_heads, c.num_kv_heads, c.head_dim
    layers = {
        "attn_norm": ParamSpec((L, D), ("layers", "norm"), "ones"),
        "q": ParamSpec((L, D, H, Dh), ("layers", "embed", "heads", "head_dim"), fan_in_axes=(1,)),
        "k": ParamSpec((L, D, K, Dh), ("layers", "embed", "kv_heads", "head_dim"), fan_in_axes=(1,)),
        "v": ParamSpec((L, D, K, Dh), ("layers", "embed", "kv_heads", "head_dim"), fan_in_axes=(1,)),
        "o": ParamSpec((L, H, Dh, D), ("layers", "heads", "head_dim", "embed"), fan_in_axes=(1, 2)),
        "mlp_norm": ParamSpec((L, D), ("layers", "norm"), "ones"),
        "gate": ParamSpec((L, D, F), ("layers", "embed", "mlp"), fan_in_axes=(1,)),
        "up": ParamSpec((L, D, F), ("layers", "embed", "mlp"), fan_in_axes=(1,)),
        "down": ParamSpec((L, F, D), ("layers", "mlp", "embed"), fan_in_axes=(1,)),
    }
    if c.qkv_bias:
        layers["q_bias"] = ParamSpec((L, H, Dh), ("layers", "heads", "head_dim"), "zeros")
        layers["k_bias"] = ParamSpec((L, K, Dh), ("layers", "kv_heads", "head_dim"), "zeros")
        layers["v_bias"] = ParamSpec((L, K, Dh), ("layers", "kv_heads", "head_dim"), "zeros")
    if c.qk_norm:
        layers["q_norm"] = ParamSpec((L, Dh), ("layers", "head_dim"), "ones")
        layers["k_norm"] = ParamSpec((L, Dh), ("layers", "head_dim"), "ones")
    specs: Params = {
        # Embedding rows get std 1 / sqrt(D) so tied logits start O(1).
        "embed": ParamSpec((V, D), ("vocab", "embed"), fan_in_axes=(1,)),
        "layers": layers,
        "final_norm": ParamSpec((D,), ("norm",), "ones"),
    }
    if not c.tie_embeddings:
        specs["lm_head"] = ParamSpec((D, V), ("embed", "vocab"), fan_in_axes=(0,))
    return specs


def _is_spec(x) -> bool:
    return isinstance(x, ParamSpec)


def param_axes(config: ModelConfig) -> Params:
    """Pytree (same structure as the params) of logical axis-name tuples."""
    return jax.tree.map(lambda s: s.axes, param_specs(config), is_leaf=_is_spec)


def param_shapes(config: ModelConfig) -> Params:
    """Pytree of `jax.ShapeDtypeStruct` in `config.param_dtype` (no allocation)."""
    dtype = config.weight_dtype
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, dtype), param_specs(config),
                        is_leaf=_is_spec)


def _init_one(spec: ParamSpec, key: jax.Array, dtype) -> jax.Array:
    if spec.init == "ones":
        return jnp.ones(spec.shape, dtype)
    if spec.init == "zeros":
        return jnp.zeros(spec.shape, dtype)
    fan_in = 1
    for a in spec.fan_in_axes:
        fan_in *= spec.shape[a]
    std = fan_in ** -0.5
    return (std * jax.random.normal(key, spec.shape, jnp.float32)).astype(dtype)


def init(config: ModelConfig, rng: jax.Array) -> Params:
    """Initialises parameters (nested dict of arrays in `config.param_dtype`).

    Linear weights are N(0, 1/fan_in), norms are ones, biases zeros. Pure and
    jit-able; wrap it in `jax.jit(..., out_shardings=...)` (see
    `models.sharding.init_sharded`) to create parameters directly sharded.
    """
    specs = param_specs(config)
    leaves, treedef = jax.tree.flatten(specs, is_leaf=_is_spec)
    keys = jax.random.split(rng, len(leaves))
    dtype = config.weight_dtype
    return jax.tree.unflatten(treedef, [_init_one(s, k, dtype) for s, k in zip(leaves, keys)])


def count(params: Params) -> int:
    """Number of scalars in a parameter pytree."""
    return sum(int(x.size) for x in jax.tree.leaves(params))
