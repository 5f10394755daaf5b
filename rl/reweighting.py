"""Token-level advantage reweighters that compose on top of any estimator.

`reweight(name, adv, mask, **inputs)` returns `adv * w` as [N, T], with the
weight w computed under `stop_gradient` and 0 outside the mask. `adv` may be
per-sequence [N] or per-token [N, T].

  logp_reweight         Δlog p low-probability weighting, p = π_old(y_t):
                          linear     1 + c - c·p       (the paper's rule, c=0.2)
                          normalize  1 / (1 + c - p)
                          focal      (1 - p)^c
                          reshape    1 - c + c·p       (the reversed ablation)
  delta_logp_mask       keep only the top `fraction` of tokens by
                        Δlog p = log π_old - log π_ref (weight 1, others 0)
  fipo                  f_t = clip(exp(sum_{k>=t} γ^(k-t) Δ_k), lo, hi) with
                        Δ_k = log π_θ - log π_old (detached); tokens with Â<0
                        and ratio > neg_ratio_cap get f ≤ 1
  divergence_weighted   1 + α·D_t / mean(D) with D_t a per-token divergence
                        passed in by the caller; the trainer passes the k3
                        estimate of KL(π_old‖π_ref) at the sampled token

FIPO depends on the current policy, so it is applied inside the loss
(`rl.losses.compute(..., reweight="fipo")`); the others can run once per batch.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rl import ops
from rl.registry import Registry, check_kwargs

REWEIGHTERS: Registry = Registry("advantage reweighter")


def reweight(name: str, adv, mask, **inputs) -> jax.Array:
    """`adv` [N] or [N, T] times the stop-gradient weight of `name`; [N, T] out."""
    fn = REWEIGHTERS.get(name)
    check_kwargs("advantage reweighter", name, fn, inputs)
    mask = jnp.asarray(mask).astype(bool)
    chex.assert_rank(mask, 2)
    adv = ops.as_float(adv)
    if adv.ndim == 1:
        adv = adv[:, None]
    chex.assert_equal_shape_prefix([adv, mask], 1)
    adv = jnp.broadcast_to(adv, mask.shape)
    weight = jax.lax.stop_gradient(fn(adv, mask, **inputs))
    return jnp.where(mask, adv * weight, 0.0)


def names() -> list[str]:
    return REWEIGHTERS.names()


def _tokens(x, mask) -> jax.Array:
    x = ops.as_float(x)
    chex.assert_equal_shape([x, mask])
    return x


@REWEIGHTERS.register("logp_reweight")
def logp_weight(adv, mask, *, old_logp, c: float = 0.2, form: str = "linear") -> jax.Array:
    """Weight from the sampling-time probability p = exp(old_logp) [N, T]."""
    p = jnp.exp(_tokens(old_logp, mask))
    if form == "linear":
        return 1.0 + c - c * p
    if form == "normalize":
        return 1.0 / (1.0 + c - p)
    if form == "focal":
        return jnp.power(jnp.clip(1.0 - p, 0.0, 1.0), c)
    if form == "reshape":
        return 1.0 - c + c * p
    raise ValueError(f"logp_reweight form must be linear|normalize|focal|reshape, got {form!r}")


def top_fraction_mask(values: jax.Array, mask: jax.Array, fraction: float) -> jax.Array:
    """[N, T] bool: the ceil(fraction · #mask) largest `values` inside `mask`."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    flat = jnp.where(mask, values, -jnp.inf).reshape(-1)
    count = jnp.sum(mask)
    k = jnp.ceil(fraction * count).astype(jnp.int32)
    ranked = jnp.sort(flat)[::-1]
    threshold = ranked[jnp.clip(k - 1, 0, flat.shape[0] - 1)]
    return mask & (values >= threshold) & (k > 0)


@REWEIGHTERS.register("delta_logp_mask")
def delta_logp_mask(adv, mask, *, old_logp, ref_logp, fraction: float = 0.2) -> jax.Array:
    """1 on the top `fraction` of tokens by log π_old - log π_ref, else 0."""
    delta = _tokens(old_logp, mask) - _tokens(ref_logp, mask)
    return top_fraction_mask(delta, mask, fraction).astype(adv.dtype)


@REWEIGHTERS.register("fipo")
def fipo_weight(adv, mask, *, logp, old_logp, gamma: float = 2.0 ** (-1 / 32),
                clip_low: float = 0.8, clip_high: float = 1.2, high_only: bool = False,
                neg_ratio_cap: float = 4.0) -> jax.Array:
    """Future-KL weight f_t; exactly 1 wherever logp == old_logp."""
    delta = jnp.where(mask, _tokens(logp, mask) - _tokens(old_logp, mask), 0.0)
    delta = jax.lax.stop_gradient(delta)
    future_kl = ops.reverse_discounted_cumsum(delta, gamma)
    low = 1.0 if high_only else clip_low
    f = jnp.clip(jnp.exp(future_kl), low, clip_high)
    risky = (adv < 0) & (jnp.exp(delta) > neg_ratio_cap)
    return jnp.where(risky, jnp.minimum(f, 1.0), f)


@REWEIGHTERS.register("divergence_weighted")
def divergence_weight(adv, mask, *, divergence, alpha: float = 1.0) -> jax.Array:
    """1 + α·D_t / mean(D) over the masked tokens of the batch (1 if mean is 0)."""
    d = _tokens(divergence, mask)
    mean = ops.masked_mean(d, mask)
    return jnp.where(mean > 0, 1.0 + alpha * d / jnp.where(mean > 0, mean, 1.0), 1.0)
