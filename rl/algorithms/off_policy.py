"""Off-policy correction: three log-prob streams and the behaviour weight.

Every sampled token has three log-probs, [N, T] each:

  behaviour  log π_behav  the policy that sampled it (the sampler's log-probs)
  proximal   log π_prox   the anchor of PPO's clip: `old_logp` (recomputed, the
                          sampler's) or, with no forward pass, `interpolate_proximal`
  current    log π_θ      the policy being trained (differentiated)

Decoupled PPO (AReaL) trains on w · L_clip(π_θ/π_prox, A), with the behaviour
weight w = sg(π_prox/π_behav). `apply` computes w at one of three `LEVELS`
(the log-ratio is clamped to ±20 before exp):

  token      w_t = exp(log π_prox_t - log π_behav_t)
  sequence   w_i = exp(Σ_t M_t (log π_prox_t - log π_behav_t)), at every token of row i
  geometric  w_i = exp(mean over the row's mask of the same log-ratio), at every token

and corrects it (`Correction.correction`):

  ""    off: weight 1 (the metrics are still computed)
  tis   truncated IS: weight clip(w, floor, cap), every token kept
  mis   masked IS (rejection): tokens (rows, at sequence/geometric level) with w
        outside [floor, cap] leave the loss mask, so also the token-mean
        denominator; the kept ones are weighted by the raw w

`floor` defaults to 0 for tis and 1/cap for mis. Formulas, sources and the
differences from AReaL and verl: docs/algorithms.md, "Off-policy correction".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import chex
import jax
import jax.numpy as jnp

from rl.algorithms import kl as kl_lib
from rl.algorithms import ops
from rl.registry import Registry

LOG_RATIO_CLAMP = 20.0
CORRECTIONS = ("", "tis", "mis")
QUANTILES = {"is_weight_p50": 0.5, "is_weight_p90": 0.9, "is_weight_p99": 0.99}

LEVELS: Registry = Registry("off-policy level")


@LEVELS.register("token")
def _token(log_ratio: jax.Array, mask: jax.Array) -> jax.Array:
    return log_ratio


@LEVELS.register("sequence")
def _sequence(log_ratio: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.broadcast_to(ops.masked_sum(log_ratio, mask, axis=1)[:, None], mask.shape)


@LEVELS.register("geometric")
def _geometric(log_ratio: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.broadcast_to(ops.masked_mean(log_ratio, mask, axis=1)[:, None], mask.shape)


def resolve_correction(value: str | None, asynchronous: bool) -> str:
    """`rl.off_policy.correction` for the rollout mode: None is "tis" when rollouts are
    asynchronous (stale behaviour policies) and "" (off) otherwise; a set value is kept."""
    if value is None:
        return "tis" if asynchronous else ""
    return value


@dataclasses.dataclass(frozen=True)
class Correction:
    """The `rl.off_policy` section, checked. `correction=None` is a placeholder the
    rollout mode resolves (`resolve_correction`); until then it means off."""

    correction: str | None = None
    level: str = "token"
    cap: float = 2.0
    floor: float | None = None

    def __post_init__(self):
        if self.correction is not None and self.correction not in CORRECTIONS:
            raise ValueError(f"rl.off_policy.correction must be '', 'tis' or 'mis' (or None), "
                             f"got {self.correction!r}")
        if self.level not in LEVELS:
            raise ValueError(f"rl.off_policy.level must be one of {', '.join(LEVELS.names())}, "
                             f"got {self.level!r}")
        if not self.cap > 0:
            raise ValueError(f"rl.off_policy.cap must be > 0, got {self.cap}")
        if self.floor is not None and not self.floor >= 0:
            raise ValueError(f"rl.off_policy.floor must be >= 0, got {self.floor}")
        if not self.lower < self.cap:
            where = "rl.off_policy.floor" if self.floor is not None else "the default floor 1/cap"
            raise ValueError(f"{where} ({self.lower:g}) must be < rl.off_policy.cap "
                             f"({self.cap:g}) with correction={self.kind!r}")

    @property
    def kind(self) -> str:
        """The correction with the placeholder read as off: "", "tis" or "mis"."""
        return self.correction or ""

    @property
    def lower(self) -> float:
        """The lower bound in use: `floor`, or 0 (tis) / 1/cap (mis) when unset."""
        if self.floor is not None:
            return float(self.floor)
        return 1.0 / self.cap if self.kind == "mis" else 0.0


def from_config(section: Mapping[str, Any]) -> Correction:
    """`Correction` from a `config.rl.off_policy` section; ValueError naming the key."""
    floor = section["floor"]
    return Correction(correction=section["correction"], level=section["level"],
                      cap=float(section["cap"]), floor=None if floor is None else float(floor))


def interpolation_weight(versions: jax.Array, version: jax.Array) -> jax.Array:
    """[N, T] α of `interpolate_proximal` for token versions [N, T] (-1 = padding) and the
    learner's version V [] (updates so far): α = (v_prox - v_b)/(v_θ - v_b) with
    v_prox = V and v_θ = V + 1, clamped to [0, 1]; 0 where v_θ - v_b <= 0 or v_b < 0."""
    v_b = jnp.asarray(versions).astype(jnp.float32)
    v_prox = jnp.asarray(version).astype(jnp.float32)
    gap = v_prox + 1.0 - v_b
    ok = (gap > 0) & (jnp.asarray(versions) >= 0)
    alpha = jnp.where(ok, (v_prox - v_b) / jnp.where(ok, gap, 1.0), 0.0)
    return jnp.clip(alpha, 0.0, 1.0)


def interpolate_proximal(behavior_logp, logp, versions, version) -> jax.Array:
    """[N, T] log π_prox ≈ (1 - α)·log π_behav + α·sg(log π_θ) (AReaL's log-linear
    approximation): exactly the behaviour log-prob for tokens the learner's current
    version sampled (α = 0), nearer π_θ the staler the token. No gradient flows."""
    behavior_logp, logp = ops.as_float(behavior_logp), ops.as_float(logp)
    chex.assert_equal_shape([behavior_logp, logp, versions])
    chex.assert_rank(version, 0)
    alpha = interpolation_weight(versions, version)
    return behavior_logp + alpha * (jax.lax.stop_gradient(logp) - behavior_logp)


def raw_weight(level: str, proximal_logp, behavior_logp, mask) -> jax.Array:
    """[N, T] detached behaviour weight π_prox/π_behav at `level` (module docstring)."""
    log_ratio = ops.as_float(proximal_logp) - ops.as_float(behavior_logp)
    log_w = LEVELS.get(level)(jnp.where(mask, log_ratio, 0.0), mask)
    return jax.lax.stop_gradient(jnp.exp(jnp.clip(log_w, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)))


def apply(correction: Correction, proximal_logp, behavior_logp, logp, mask
          ) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
    """(weight [N, T], kept mask [N, T], metrics) for the loss.

    proximal_logp, behavior_logp, logp [N, T] (log π_prox, log π_behav, log π_θ),
    mask [N, T] bool. The weight multiplies each token's loss (detached); the kept
    mask replaces the loss mask (`mis` removes tokens). Metrics (`metrics`) are of
    the raw weight over `mask`, computed whether or not a correction is on.
    """
    mask = jnp.asarray(mask).astype(bool)
    chex.assert_equal_shape([proximal_logp, behavior_logp, logp, mask])
    w = raw_weight(correction.level, proximal_logp, behavior_logp, mask)
    outside = (w < correction.lower) | (w > correction.cap)
    kind = correction.kind
    if kind == "tis":
        weight, kept = jnp.clip(w, correction.lower, correction.cap), mask
    elif kind == "mis":
        kept = mask & ~outside
        weight = jnp.where(kept, w, 0.0)
    else:
        weight, kept, outside = jnp.ones_like(w), mask, jnp.zeros_like(outside)
    return weight, kept, metrics(w, outside, behavior_logp, logp, mask)


def metrics(w, outside, behavior_logp, logp, mask) -> dict[str, jax.Array]:
    """Scalars over `mask` [N, T]: the raw weight w's mean, quantiles (linear
    interpolation, as np.quantile) and max; the share of tokens the correction
    changed (`outside`: truncated by tis, removed by mis); the k1 and k3 estimates of
    KL(π_behav‖π_θ) on the behaviour's samples. All 0 for an empty mask."""
    w = jax.lax.stop_gradient(w)
    any_ = jnp.any(mask)
    masked = jnp.where(mask, w, jnp.nan).reshape(-1)
    out = {"is_weight_mean": ops.masked_mean(w, mask)}
    for name, q in QUANTILES.items():
        out[name] = jnp.where(any_, jnp.nanquantile(masked, q), 0.0)
    out["is_weight_max"] = ops.masked_min_max(w, mask)[1]
    out["corrected_frac"] = ops.masked_mean(outside, mask)
    behavior_logp = jax.lax.stop_gradient(ops.as_float(behavior_logp))
    logp = jax.lax.stop_gradient(ops.as_float(logp))
    # samples of π_behav: log ρ = log π_θ - log π_behav is kl.estimate's log r with
    # π_behav as "the policy" and π_θ as "the reference"; k3 clamps it (exp overflow)
    k1 = kl_lib.estimate("k1", behavior_logp, logp)
    k3 = kl_lib.estimate("k3", behavior_logp, logp, clamp=LOG_RATIO_CLAMP)
    out["kl_behavior_current"] = ops.masked_mean(k1, mask)
    out["kl_behavior_current_k3"] = ops.masked_mean(k3, mask)
    return out
