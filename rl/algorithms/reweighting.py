"""Token-level advantage reweighters that compose on top of any estimator.

`reweight(name, adv, mask, **inputs)` returns `adv * w` as [N, T], with the
weight w computed under `stop_gradient` and 0 outside the mask. `adv` may be
per-sequence [N] or per-token [N, T].

  logp_reweight         Δlog p low-probability weighting, p = π_old(y_t):
                          linear     1 + c - c·p       (the paper's rule, c=0.2)
                          normalize  1 / (1 + c - p)
                          focal      (1 - p)^c
                          reshape    1 - c + c·p       (the reversed ablation)
  delta_logp_mask       from step `start_step` on, keep the tokens whose
                        Δlog p = log π_old - log π_ref is at or above the
                        `quantile` of the batch's tokens (q = 0.2 keeps the top
                        80%): weight 1, the others 0 (and, with method="clip",
                        the trainer drops them from the loss mask too)
  fipo                  f_t = clip(exp(sum_{k>=t} γ^(k-t) Δ_k), lo, hi) with
                        Δ_k = log π_θ - log π_old (detached, 0 where the ratio
                        exceeds `ratio_mask` δ = 10); high_only (the default)
                        clips to [1, hi]; tokens with Â<0 and ratio >
                        neg_ratio_cap get f ≤ 1
  divergence_weighted   1 + α·D_t / mean(D) with D_t a per-token divergence
                        passed in by the caller (`token_divergence`): the
                        trainer computes the full-vocabulary JS(π_old‖π_ref)
                        (`divergence="js"`) or the k3 estimate at the sampled
                        token (`divergence="k3"`)

FIPO depends on the current policy, so it is applied inside the loss
(`rl.algorithms.losses.compute(..., reweight="fipo")`); the others can run once per batch.
"""

from __future__ import annotations

import inspect

import chex
import jax
import jax.numpy as jnp

from rl.algorithms import ops
from rl.registry import Registry, check_kwargs

REWEIGHTERS: Registry = Registry("advantage reweighter")


def weight(name: str, adv, mask, **inputs) -> tuple[jax.Array, jax.Array]:
    """(`adv` broadcast to [N, T], the stop-gradient weight [N, T] of `name`)."""
    fn = REWEIGHTERS.get(name)
    check_kwargs("advantage reweighter", name, fn, inputs)
    mask = jnp.asarray(mask).astype(bool)
    chex.assert_rank(mask, 2)
    adv = ops.as_float(adv)
    if adv.ndim == 1:
        adv = adv[:, None]
    chex.assert_equal_shape_prefix([adv, mask], 1)
    adv = jnp.broadcast_to(adv, mask.shape)
    return adv, jax.lax.stop_gradient(fn(adv, mask, **inputs))


def reweight(name: str, adv, mask, **inputs) -> jax.Array:
    """`adv` [N] or [N, T] times the stop-gradient weight of `name`; [N, T] out."""
    adv, w = weight(name, adv, mask, **inputs)
    return jnp.where(jnp.asarray(mask).astype(bool), adv * w, 0.0)


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


DELTA_LOGP_METHODS = ("clip", "weight")


def quantile_mask(values: jax.Array, mask: jax.Array, quantile: float) -> jax.Array:
    """[N, T] bool: the tokens of `mask` whose value is at or above the `quantile` of the
    masked values (linear interpolation, as torch.quantile); none if the mask is empty."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")
    threshold = jnp.nanquantile(jnp.where(mask, values, jnp.nan), quantile)
    return mask & (values >= threshold)


@REWEIGHTERS.register("delta_logp_mask")
def delta_logp_mask(adv, mask, *, old_logp, ref_logp, step=0, quantile: float = 0.2,
                    start_step: int = 20, method: str = "clip") -> jax.Array:
    """From `start_step` on: 1 on the tokens whose log π_old - log π_ref is at or above the
    `quantile` of the batch's, else 0; 1 everywhere before. `step`: the RL step (traced).
    `method` is the trainer's: "clip" also drops the masked tokens from the loss."""
    if method not in DELTA_LOGP_METHODS:
        raise ValueError(f"delta_logp_mask method must be one of {DELTA_LOGP_METHODS}, "
                         f"got {method!r}")
    delta = _tokens(old_logp, mask) - _tokens(ref_logp, mask)
    keep = quantile_mask(delta, mask, quantile)
    return jnp.where(jnp.asarray(step) >= start_step, keep, True).astype(adv.dtype)


def fipo_terms(adv, mask, logp, old_logp, *, gamma: float, clip_low: float, clip_high: float,
               high_only: bool, neg_ratio_cap: float, ratio_mask: float | None):
    """(weight f [N, T], future KL [N, T], δ-masked [N, T] bool) of FIPO, detached."""
    delta = jnp.where(mask, _tokens(logp, mask) - _tokens(old_logp, mask), 0.0)
    delta = jax.lax.stop_gradient(delta)
    raw = delta
    masked = jnp.zeros(mask.shape, bool)
    if ratio_mask is not None:  # Δ_k = 0 where the ratio exceeds δ (the dual-clip bound)
        masked = mask & (delta > jnp.log(ratio_mask))
        delta = jnp.where(masked, 0.0, delta)
    future_kl = ops.reverse_discounted_cumsum(delta, gamma)
    low = 1.0 if high_only else clip_low
    f = jnp.clip(jnp.exp(future_kl), low, clip_high)
    risky = (adv < 0) & (jnp.exp(raw) > neg_ratio_cap)  # the token's own ratio, unmasked
    return jnp.where(risky, jnp.minimum(f, 1.0), f), future_kl, masked


@REWEIGHTERS.register("fipo")
def fipo_weight(adv, mask, *, logp, old_logp, gamma: float = 2.0 ** (-1 / 32),
                clip_low: float = 0.8, clip_high: float = 1.2, high_only: bool = True,
                neg_ratio_cap: float = 4.0, ratio_mask: float | None = 10.0) -> jax.Array:
    """Future-KL weight f_t; exactly 1 wherever logp == old_logp."""
    return fipo_terms(adv, mask, logp, old_logp, gamma=gamma, clip_low=clip_low,
                      clip_high=clip_high, high_only=high_only, neg_ratio_cap=neg_ratio_cap,
                      ratio_mask=ratio_mask)[0]


def fipo_options(**options) -> dict:
    """FIPO's options with its defaults filled in (RegistryError for an unknown one)."""
    check_kwargs("advantage reweighter", "fipo", fipo_weight, options)
    defaults = {k: v.default for k, v in inspect.signature(fipo_weight).parameters.items()
                if v.kind is inspect.Parameter.KEYWORD_ONLY and v.default is not v.empty}
    return defaults | options


DIVERGENCES = ("js", "k3")


@REWEIGHTERS.register("divergence_weighted")
def divergence_weight(adv, mask, *, token_divergence, alpha: float = 1.0,
                      divergence: str = "js") -> jax.Array:
    """1 + α·D_t / mean(D) over the masked tokens of the batch (1 if mean is 0).
    `divergence` names what the caller computed D with ("js" or "k3")."""
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence_weighted divergence must be one of {DIVERGENCES}, "
                         f"got {divergence!r}")
    d = _tokens(token_divergence, mask)
    mean = ops.masked_mean(d, mask)
    return jnp.where(mean > 0, 1.0 + alpha * d / jnp.where(mean > 0, mean, 1.0), 1.0)
