"""Masked reductions and group statistics shared by estimators and losses.

All functions are jit-compatible: shapes are static, group structure is data.
Group ids may be any integers (prompt indices, hashes); `group_index` maps them
to dense indices `[0, N)` with a sort, so no host round trip is needed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def as_float(x) -> jax.Array:
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def masked_sum(x: jax.Array, mask: jax.Array, axis=None) -> jax.Array:
    return jnp.sum(jnp.where(mask, x, 0.0), axis=axis)


def masked_mean(x: jax.Array, mask: jax.Array, axis=None) -> jax.Array:
    """Mean of `x` where `mask`; 0 where nothing is selected (never NaN)."""
    count = jnp.sum(mask, axis=axis)
    return masked_sum(x, mask, axis) / jnp.maximum(count, 1)


def masked_var(x: jax.Array, mask: jax.Array, ddof: int = 0) -> jax.Array:
    """Variance over all selected entries; 0 when fewer than `ddof + 1` entries."""
    count = jnp.sum(mask)
    mean = masked_mean(x, mask)
    ss = masked_sum(jnp.square(x - mean), mask)
    return jnp.where(count > ddof, ss / jnp.maximum(count - ddof, 1), 0.0)


def masked_whiten(x: jax.Array, mask: jax.Array, eps: float = 1e-6,
                  ddof: int = 0) -> jax.Array:
    """(x - mean) / (std + eps) over the selected entries; 0 where not selected."""
    mean = masked_mean(x, mask)
    std = jnp.sqrt(masked_var(x, mask, ddof))
    return jnp.where(mask, (x - mean) / (std + eps), 0.0)


def masked_min_max(x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Min and max over selected entries; (0, 0) when nothing is selected."""
    any_ = jnp.any(mask)
    lo = jnp.min(jnp.where(mask, x, jnp.inf))
    hi = jnp.max(jnp.where(mask, x, -jnp.inf))
    return jnp.where(any_, lo, 0.0), jnp.where(any_, hi, 0.0)


def group_index(group_ids: jax.Array) -> jax.Array:
    """Dense group index in [0, N) for arbitrary integer ids `[N]`."""
    n = group_ids.shape[0]
    _, inverse = jnp.unique(group_ids, size=n, fill_value=0, return_inverse=True)
    return inverse.reshape(n)


def group_sum(x: jax.Array, index: jax.Array, valid: jax.Array) -> jax.Array:
    """Per-sample sum of `x` over the sample's group (valid members only). [N]."""
    n = index.shape[0]
    sums = jax.ops.segment_sum(jnp.where(valid, x, 0.0), index, num_segments=n)
    return sums[index]


def group_moments(x: jax.Array, index: jax.Array, valid: jax.Array,
                  ddof: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-sample (count, mean, std) of the sample's group over valid members.

    A group with fewer than `ddof + 1` valid members has std 0.
    """
    count = group_sum(jnp.ones_like(x), index, valid)
    mean = group_sum(x, index, valid) / jnp.maximum(count, 1)
    ss = group_sum(jnp.square(x - mean), index, valid)
    var = jnp.where(count > ddof, ss / jnp.maximum(count - ddof, 1), 0.0)
    return count, mean, jnp.sqrt(var)


def reverse_discounted_cumsum(x: jax.Array, gamma: float, axis: int = -1) -> jax.Array:
    """y_t = sum_{k >= t} gamma^(k - t) x_k along `axis`, by an associative scan.

    Stable for long sequences (no gamma^-t factors).
    """
    x = jnp.moveaxis(x, axis, 0)
    decay = jnp.full_like(x, gamma)

    def combine(left, right):
        # Elements are affine maps y -> a * y + b composed right-to-left.
        a_l, b_l = left
        a_r, b_r = right
        return a_l * a_r, b_l * a_r + b_r

    _, y = jax.lax.associative_scan(combine, (decay, x), reverse=True)
    return jnp.moveaxis(y, 0, axis)
