"""A frozen weight stored in 8 or 4 bits: blockwise absmax int8, or NF4 (QLoRA).

    q = quantize(w, "nf4", axis=-3, block=64)   # w [L, D, H, Dh], blocks of 64 along D
    w_hat = dequantize(q, jnp.bfloat16)         # [L, D, H, Dh]

Each run of `block` consecutive entries along the blocked `axis` (a weight's input
dim, as bitsandbytes blocks a torch [out, in] weight) shares one fp32 scale, its
absolute maximum:

    int8   codes = round(w / (absmax / 127)) in [-127, 127]    8 bits + 32/block
    nf4    codes = the nearest of NF4's 16 levels to w / absmax   4 bits + 32/block

NF4's levels are the quantiles of a standard normal scaled to [-1, 1] (QLoRA, Dettmers
et al. 2023, appendix E); codes are `jnp.uint4`, which XLA stores two to a byte on
TPU and GPU. The nearest level is found by `searchsorted` over the 15 midpoints:
O(1) memory per entry. The scales stay fp32 (QLoRA's double quantization of the
scales, 0.37 bits per parameter saved, is not done).

`Quantized` is a pytree whose leaves keep the weight's leading dims, so a stack of
layers scans and shards like the dense weight (`axis` counts from the end, so it
still names the same dim after the layer dim is scanned off).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

KINDS = ("int8", "nf4")
NF4_LEVELS = np.array([
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], np.float32)
INT8_MAX = 127.0


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Quantized:
    """codes [..., N, ...] (int8 or uint4) and scale [..., N / block, ...] fp32 (the
    blocked dim at `axis` < 0); `kind` "int8" | "nf4"."""

    codes: jax.Array
    scale: jax.Array
    kind: str = dataclasses.field(metadata={"static": True})
    axis: int = dataclasses.field(metadata={"static": True})

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.codes.shape)

    @property
    def block(self) -> int:
        return self.codes.shape[self.axis] // self.scale.shape[self.axis]


def check_block(shape: tuple[int, ...], axis: int, block: int, name: str = "weight") -> None:
    """ValueError unless `block` divides the dim at `axis` of `shape`."""
    if block < 1 or shape[axis] % block:
        raise ValueError(f"quantization block {block} does not divide {name}'s dim "
                         f"{shape[axis]} (shape {tuple(shape)}, axis {axis})")


def _blocked(x: jax.Array, axis: int, block: int) -> jax.Array:
    """x [..., N, ...] -> [..., N / block, block, ...] (the dim at `axis` < 0 split)."""
    a = x.ndim + axis
    return x.reshape(x.shape[:a] + (x.shape[a] // block, block) + x.shape[a + 1:])


def quantize(w: jax.Array, kind: str, *, axis: int, block: int = 64) -> Quantized:
    """`w` in blocks of `block` along `axis` (< 0), as `kind` codes and fp32 scales."""
    if kind not in KINDS:
        raise ValueError(f"unknown quantization {kind!r}; known: {KINDS}")
    if axis >= 0:
        raise ValueError(f"axis counts from the end (< 0), got {axis}")
    check_block(w.shape, axis, block)
    x = _blocked(w.astype(jnp.float32), axis, block)
    a = x.ndim + axis  # the within-block dim
    absmax = jnp.max(jnp.abs(x), axis=a, keepdims=True)
    safe = jnp.where(absmax > 0, absmax, 1.0)
    if kind == "int8":
        scale = absmax / INT8_MAX
        codes = jnp.clip(jnp.round(x / jnp.where(absmax > 0, scale, 1.0)),
                         -INT8_MAX, INT8_MAX).astype(jnp.int8)
    else:
        scale = absmax
        mid = jnp.asarray((NF4_LEVELS[1:] + NF4_LEVELS[:-1]) / 2)
        codes = jnp.searchsorted(mid, x / safe, side="left").astype(jnp.uint4)
    return Quantized(codes.reshape(w.shape), jnp.squeeze(scale, a), kind, axis)


def dequantize(q: Quantized, dtype=jnp.float32) -> jax.Array:
    """The weight the codes stand for, [..., N, ...] in `dtype`."""
    codes = _blocked(q.codes, q.axis, q.block)
    if q.kind == "int8":
        values = codes.astype(jnp.float32)
    else:
        values = nf4_values(codes)
    a = codes.ndim + q.axis
    return (values * jnp.expand_dims(q.scale, a)).reshape(q.shape).astype(dtype)


def nf4_values(codes: jax.Array) -> jax.Array:
    """NF4 codes -> their fp32 levels by a tree of 15 selects on the code's 4 bits:
    elementwise, so it fuses into the matmul's operand (a table lookup is a gather, which
    XLA's TPU cost analysis counted at 700 GB per decode step of a 7B model)."""
    c = codes.astype(jnp.int32)
    level = [np.float32(v) for v in NF4_LEVELS]
    for bit in range(4):
        on = (c >> bit) & 1 == 1
        level = [jnp.where(on, level[2 * k + 1], level[2 * k]) for k in range(len(level) // 2)]
    return level[0]


def nbytes(q: Quantized) -> int:
    """Bytes of the stored codes (4-bit codes counted two to a byte) and scales."""
    bits = 4 if q.kind == "nf4" else 8
    return int(np.prod(q.shape)) * bits // 8 + int(np.prod(q.scale.shape)) * 4


def abstract(shape: tuple[int, ...], kind: str, *, axis: int, block: int) -> Quantized:
    """A `Quantized` of `jax.ShapeDtypeStruct`s for a weight of `shape` (no allocation)."""
    check_block(shape, axis, block)
    a = len(shape) + axis
    codes = jax.ShapeDtypeStruct(shape, jnp.int8 if kind == "int8" else jnp.uint4)
    scale = jax.ShapeDtypeStruct(shape[:a] + (shape[a] // block,) + shape[a + 1:], jnp.float32)
    return Quantized(codes, scale, kind, axis)
