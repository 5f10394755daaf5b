"""LoRA: low-rank adapters beside a frozen base, as a pytree of their own.

    lora = LoraConfig(rank=16, alpha=32)
    adapters = init(config, lora, rng)             # {"layers": {"q": {"a", "b"}, ...}}
    policy = attach(base, adapters, lora)          # params whose weights are `Adapted`
    logits = models.apply(config, policy, tokens)  # x W + (alpha / r) (x A) B
    dense = merge(config, base, adapters, lora)    # W + (alpha / r) A B, plain arrays

Every linear weight of the decoder layers can take an adapter (`TARGETS`). A weight
W [L, *in, *out] (the layer dim, its input dims, its output dims: q is [L, D, H, Dh],
o is [L, H, Dh, D]) gets

    a [L, *in, r]    uniform in ±1/sqrt(fan_in) (PEFT's kaiming_uniform(a=√5))
    b [L, r, *out]   zeros, so the adapted model starts as the base

and the layer computes x W + s (x a) b with s = alpha / r (PEFT's scaling), through
`models.linear`. The base may be plain or `models.quant.Quantized` (QLoRA); the
reference policy is the base itself (`attach` with no adapter). Adapters are a
separate pytree, not leaves spliced into the params, so the optimizer, the
checkpoints and a weight sync see only them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from models import quant
from models.config import ModelConfig
from models.params import ParamSpec, param_specs

# weight -> how many of its dims (after the layer dim) are inputs
TARGETS = {"q": 1, "k": 1, "v": 1, "o": 2, "gate": 1, "up": 1, "down": 1}


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """rank r >= 1, alpha (the update is scaled by alpha / r), the adapted weights."""

    rank: int
    alpha: float
    targets: tuple[str, ...] = tuple(TARGETS)

    def __post_init__(self):
        if self.rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {self.rank}")
        if self.alpha <= 0:
            raise ValueError(f"LoRA alpha must be > 0, got {self.alpha}")
        bad = [t for t in self.targets if t not in TARGETS]
        if bad or not self.targets:
            raise ValueError(f"LoRA targets {list(self.targets)}: unknown {bad}; "
                             f"known: {list(TARGETS)}")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Adapted:
    """A frozen weight (array or `Quantized`) with its adapter: a [..., *in, r], b [..., r,
    *out], scale s = alpha / r. Stands for base + s·a·b."""

    base: Any
    a: jax.Array
    b: jax.Array
    scale: float = dataclasses.field(metadata={"static": True})
    n_in: int = dataclasses.field(metadata={"static": True})  # input dims of the weight
    # several adapters (`stack`: a [..., N, *in, r]): each batch row's adapter [..., B]
    index: jax.Array | None = None
    # > 0: the rows are `blocks` (= N) equal contiguous blocks, block k running adapter k
    # (`select` finds it), so one batched product serves them (`models.linear`)
    blocks: int = dataclasses.field(default=0, metadata={"static": True})

    @property
    def lead(self) -> int:
        """Leading (stacked layer) dims: 1 on the stacked params, 0 inside the scan."""
        return self.a.ndim - 1 - self.n_in - (self.index is not None)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.base.shape)


def adapter_specs(config: ModelConfig, lora: LoraConfig) -> dict:
    """{"layers": {weight: {"a": ParamSpec, "b": ParamSpec}}}: shapes and logical axes
    (the rank dim is never split; the others follow the weight's)."""
    specs = param_specs(config)["layers"]
    out = {}
    for name in lora.targets:
        s, n_in = specs[name], TARGETS[name]
        out[name] = {
            "a": ParamSpec(s.shape[:1 + n_in] + (lora.rank,), s.axes[:1 + n_in] + (None,),
                           "normal", tuple(range(1, 1 + n_in))),
            "b": ParamSpec(s.shape[:1] + (lora.rank,) + s.shape[1 + n_in:],
                           s.axes[:1] + (None,) + s.axes[1 + n_in:], "zeros"),
        }
    return {"layers": out}


def init(config: ModelConfig, lora: LoraConfig, rng: jax.Array, dtype=jnp.float32) -> dict:
    """Fresh adapters: a ~ U(±1/sqrt(fan_in)), b = 0 (the adapted model is the base)."""
    specs = adapter_specs(config, lora)["layers"]
    keys = jax.random.split(rng, len(specs))
    out = {}
    for key, (name, s) in zip(keys, specs.items()):
        fan_in = math.prod(s["a"].shape[i] for i in s["a"].fan_in_axes)
        bound = fan_in ** -0.5
        out[name] = {"a": jax.random.uniform(key, s["a"].shape, jnp.float32, -bound, bound)
                     .astype(dtype), "b": jnp.zeros(s["b"].shape, dtype)}
    return {"layers": out}


def attach(params: dict, adapters: dict | None, lora: LoraConfig | None) -> dict:
    """`params` whose adapted weights are `Adapted(base, a, b, s)` (a pytree; no copy).
    `adapters=None` returns `params`: the base, adapter off."""
    if adapters is None:
        return params
    layers = dict(params["layers"])
    for name, ab in adapters["layers"].items():
        layers[name] = Adapted(layers[name], ab["a"], ab["b"], lora.scale, TARGETS[name])
    return {**params, "layers": layers}


def stack(adapters: list[dict]) -> dict:
    """N adapters of one LoraConfig as one: a [L, N, *in, r], b [L, N, r, *out] (the layer
    dim first, so the layer scan slices it as before)."""
    return jax.tree.map(lambda *xs: jnp.stack(xs, axis=1), *adapters)


def select(params: dict, arms: Any) -> dict:
    """`params` attached to stacked adapters (`attach(base, stack(...), lora)`) with batch
    row i running adapter `arms[i]` ([B] int32); the index is stacked per layer, as the
    layer scan slices every leaf. Host `arms` that are N equal contiguous blocks 0..N-1
    (every arm the same number of rows, no padding) also set `Adapted.blocks`."""
    layers = dict(params["layers"])
    for name, w in layers.items():
        if isinstance(w, Adapted):
            index = jnp.asarray(arms, jnp.int32)
            layers[name] = dataclasses.replace(
                w, index=jnp.broadcast_to(index, (w.a.shape[0],) + index.shape),
                blocks=_blocks(arms, w.a.shape[1]))
    return {**params, "layers": layers}


def _blocks(arms: Any, n: int) -> int:
    """n when host `arms` [B] is repeat(0..n-1, B / n), else 0."""
    if isinstance(arms, jax.Array) or len(arms) % n:
        return 0
    arms = np.asarray(arms)
    return n if np.array_equal(arms, np.repeat(np.arange(n), len(arms) // n)) else 0


def delta(a: jax.Array, b: jax.Array, lead: int, dtype=jnp.float32) -> jax.Array:
    """a [*lead, *in, r] · b [*lead, r, *out] -> [*lead, *in, *out], in `dtype`."""
    r = a.shape[-1]
    lhs = a.reshape(a.shape[:lead] + (-1, r)).astype(dtype)
    rhs = b.reshape(b.shape[:lead] + (r, -1)).astype(dtype)
    return jnp.matmul(lhs, rhs).reshape(a.shape[:-1] + b.shape[lead + 1:])


def dense(w: Any, dtype) -> jax.Array:
    """A stored weight as a plain array in `dtype`: an array cast, a `Quantized` one
    dequantized, an `Adapted` one merged (base + s·a·b, summed in fp32)."""
    if isinstance(w, Adapted):
        if w.index is not None:
            raise ValueError("a weight whose rows run different adapters has no dense form")
        base = dense(w.base, jnp.float32)
        return (base + w.scale * delta(w.a, w.b, w.lead)).astype(dtype)
    if isinstance(w, quant.Quantized):
        return quant.dequantize(w, dtype)
    return w.astype(dtype)


def merge(config: ModelConfig, params: dict, adapters: dict | None,
          lora: LoraConfig | None, dtype=None) -> dict:
    """Plain params (every weight an array in `dtype`, default the config's weight dtype):
    the base dequantized, plus s·a·b where adapted. What an export or a merged sampler
    copy holds."""
    dtype = dtype or config.weight_dtype
    layers = dict(params["layers"])
    for name, w in attach(params, adapters, lora)["layers"].items():
        if isinstance(w, (Adapted, quant.Quantized)):
            layers[name] = dense(w, dtype)
    return {**params, "layers": layers}


def checksum(tree: Any) -> jax.Array:
    """A float32 [] fingerprint of a pytree's values, computed on the device: Σ over
    leaves of Σ x·w with a fixed per-position weight (so any changed value or a swapped
    pair moves it). Equal trees give bit-equal checksums. Unlike the bit hash of
    `rl.checkpoint.trees.checksums`, it is continuous in the values, so two runs'
    adapters can be compared to a tolerance (the `--shared_base` equality checks)."""
    total = jnp.zeros((), jnp.float32)
    for i, x in enumerate(jax.tree.leaves(tree)):
        x = jnp.ravel(x).astype(jnp.float32)
        w = 1.0 + jnp.cos(jnp.arange(x.size, dtype=jnp.float32) * 0.618 + i)
        total = total + jnp.sum(x * w)
    return total


def quantize_base(config: ModelConfig, params: dict, kind: str, block: int = 64) -> dict:
    """`params` with every decoder-layer linear weight (`TARGETS`) as `Quantized`
    (blocks of `block` along its last input dim); norms, embeddings and the output
    head stay as they are (QLoRA's split)."""
    layers = dict(params["layers"])
    for name, n_in in TARGETS.items():
        w = layers[name]
        layers[name] = quant.quantize(w, kind, axis=quant_axis(name, w.ndim), block=block)
    return {**params, "layers": layers}


def quant_axis(name: str, ndim: int) -> int:
    """The blocked axis (< 0) of weight `name` with `ndim` dims (layer dim included):
    its last input dim (D of q [L, D, H, Dh], Dh of o [L, H, Dh, D])."""
    return TARGETS[name] - ndim
