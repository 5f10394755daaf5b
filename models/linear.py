"""A linear layer over a weight in any stored form: an array, `Quantized` (8 or 4
bits), or `Adapted` (a LoRA adapter over either).

    y = project(x, p["q"], "btd,dhk->bthk", dtype)

A plain or quantized weight is one einsum with the weight in the compute dtype (a
quantized one dequantized first: inside the layer scan, so one layer's weights exist
dense at a time). A quantized weight's backward dequantizes it again rather than
keeping the dense copy for the gradient of x (`frozen_einsum`): a stacked [L, ...]
dense copy saved for the backward would cost what quantizing saved. An adapted weight adds the low-rank path, x W + s·((x a) b), never
forming W + s·a·b: its gradient reaches a and b through [.., r] activations, and no
[*in, *out] gradient of the frozen W is computed (the step full fine-tuning pays).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from models.lora import Adapted, dense
from models.quant import Quantized


def is_plain(w: Any) -> bool:
    """True for a plain array (neither quantized nor adapted)."""
    return not isinstance(w, (Adapted, Quantized))


def frozen_einsum(eq: str, x: jax.Array, w: Any, dtype) -> jax.Array:
    """einsum(eq, x, dense(w)) for a frozen weight; a `Quantized` one keeps its codes,
    not its dense form, for the backward (module doc). No gradient reaches `w`."""
    if isinstance(w, Quantized):
        return _quantized_einsum(eq, dtype, x, w)
    return jnp.einsum(eq, x, dense(w, dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _quantized_einsum(eq, dtype, x, w):
    return jnp.einsum(eq, x, dense(w, dtype))


def _quantized_fwd(eq, dtype, x, w):
    return _quantized_einsum(eq, dtype, x, w), (x, w)


def _quantized_bwd(eq, dtype, residuals, g):
    x, w = residuals
    _, vjp = jax.vjp(lambda x_: jnp.einsum(eq, x_, dense(w, dtype)), x)
    return vjp(g)[0], None  # the frozen weight gets no gradient


_quantized_einsum.defvjp(_quantized_fwd, _quantized_bwd)


def project(x: jax.Array, w: Any, eq: str, dtype) -> jax.Array:
    """einsum(eq, x, W) in `dtype` for the weight `w` stands for; `eq` contracts x's
    trailing dims with W's input dims ("btd,dhk->bthk", "nd,df->nf")."""
    if not isinstance(w, Adapted):
        return frozen_einsum(eq, x, w, dtype)
    inputs, out = eq.split("->")
    lhs, rhs = inputs.split(",")
    n_in = w.n_in
    r = _free(eq, "rzyxwvu")
    low = "".join(c for c in lhs if c not in rhs[:n_in]) + r
    a, b = w.a.astype(dtype), w.b.astype(dtype)
    if w.blocks:
        xab = _per_block(x, a, b, w.blocks, lhs, rhs, out, low, n_in, r)
    elif w.index is not None:
        xab = _per_row(x, a, b, w.index, lhs, rhs, out, low, n_in, r)
    else:
        xa = jnp.einsum(f"{lhs},{rhs[:n_in]}{r}->{low}", x, a)
        xab = jnp.einsum(f"{low},{r}{rhs[n_in:]}->{out}", xa, b)
    return frozen_einsum(eq, x, w.base, dtype) + (w.scale * xab).astype(dtype)


def _free(used: str, pool: str) -> str:
    """The first letter of `pool` not in the einsum letters `used`."""
    return next(c for c in pool if c not in used)


def _per_block(x, a, b, blocks: int, lhs: str, rhs: str, out: str, low: str, n_in: int,
               r: str):
    """Rows in `blocks` equal contiguous blocks, block k through adapter k (a [N, *in, r],
    b [N, r, *out]): one batched product, the cost of one adapter over all rows (6.9 ms
    against 7.4 ms on the measurement in `_per_row`'s docstring)."""
    n = _free(lhs + rhs + out + r, "nmlkjih")
    xb = x.reshape((blocks, -1) + x.shape[1:])  # [N, B / N, ...]: rows stay contiguous
    xa = jnp.einsum(f"{n}{lhs},{n}{rhs[:n_in]}{r}->{n}{low}", xb, a)
    xab = jnp.einsum(f"{n}{low},{n}{r}{rhs[n_in:]}->{n}{out}", xa, b)
    return xab.reshape((x.shape[0],) + xab.shape[2:])


def _per_row(x, a, b, index, lhs: str, rhs: str, out: str, low: str, n_in: int, r: str):
    """Each batch row through its own adapter (a [N, *in, r], b [N, r, *out], `index` [B]):
    x through every adapter's a (one matmul of width N·r), the other adapters' columns
    zeroed, then through every b (one matmul contracting N·r). Rows of other adapters add
    exact zeros, so a row gets its own adapter's product; gathering a and b per row
    instead was 7x slower at 1280 rows and 10 adapters on XLA:CPU (docs/lora.md). A
    non-finite entry of one adapter's b would reach every row (0 · inf): callers pass
    finite adapters (`rl.train.arms` checks)."""
    if x.shape[0] != index.shape[0]:  # rows flattened with their positions ([B·T, D])
        index = jnp.repeat(index, x.shape[0] // index.shape[0])
    n = _free(lhs + rhs + out + r, "nmlkjih")
    wide = low[:-1] + n + r  # [B, ..., N, r]
    xa = jnp.einsum(f"{lhs},{n}{rhs[:n_in]}{r}->{wide}", x, a)
    mine = jax.nn.one_hot(index, a.shape[0], dtype=jnp.bool_)
    mine = mine.reshape(mine.shape[:1] + (1,) * (xa.ndim - 3) + mine.shape[1:] + (1,))
    xa = jnp.where(mine, xa, jnp.zeros((), xa.dtype))
    return jnp.einsum(f"{wide},{n}{r}{rhs[n_in:]}->{out}", xa, b)
