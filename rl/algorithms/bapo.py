"""BAPO's adaptive clip bounds (Xi et al. 2025, arXiv 2510.18927).

Before each loss evaluation the explicit ratio bounds (c_low, c_high) start at
(low_start, high_start) and are raised step by step, on detached ratios,
until the positive-advantage tokens carry at least `target` of the loss:

  share(c_low, c_high) = pos / (pos + neg)
  pos = Σ_{A>=0} M·u·min(r, c_high)·A        neg = Σ_{A<0} M·u·max(r, c_low)·|A|

with u = 1 (`measure="code"`, the authors' verl recipe, which compares pos/neg
with a ratio target; share = ratio/(1 + ratio) is the same test) or
u = π_old(y_t) (`measure="paper"`, the paper's π_rollout-weighted Eq. 8).
share = 1 when neg = 0 (the code's infinite ratio).

`order="low_first"` (the code) raises c_low to its max one step at a time,
then c_high; `"high_first"` (the paper's Algorithm 1) the other way round.
Both stop at the first bounds that meet the target, else keep both at their
max. The steps form a fixed path of candidate bounds, so the search is a
static-shape computation under jit: one masked sum per candidate bound, then
the first state on the path that meets the target (`search`).
Raising c_low can only grow neg, so it never meets a target the start missed:
whenever the start misses, c_low ends at low_max (see docs/algorithms.md).
"""

from __future__ import annotations

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np

ORDERS = ("low_first", "high_first")
MEASURES = ("code", "paper")


def check_options(*, target: float = 0.4, low_start: float = 0.6, low_max: float = 0.9,
                  low_step: float = 0.02, high_start: float = 1.2, high_max: float = 3.0,
                  high_step: float = 0.05, dual_clip: float | None = 3.0,
                  order: str = "low_first", measure: str = "code") -> None:
    """ValueError naming the first bad BAPO option (rl.loss.<option>)."""
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"rl.loss.target (bapo's positive share) must be in [0, 1], got {target}")
    if not 0.0 < low_start <= low_max <= 1.0 <= high_start <= high_max:
        raise ValueError("bapo needs 0 < rl.loss.low_start <= low_max <= 1 <= high_start <= "
                         f"high_max, got {low_start}, {low_max}, {high_start}, {high_max}")
    if low_step < 0 or high_step < 0:
        raise ValueError(f"rl.loss.low_step and high_step must be >= 0 (0 = fixed bound), got "
                         f"{low_step}, {high_step}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"rl.loss.dual_clip must be > 1, got {dual_clip}")
    if order not in ORDERS:
        raise ValueError(f"rl.loss.order must be one of {', '.join(ORDERS)}, got {order!r}")
    if measure not in MEASURES:
        raise ValueError(f"rl.loss.measure must be one of {', '.join(MEASURES)}, got "
                         f"{measure!r}")


def candidates(start: float, stop: float, step: float) -> np.ndarray:
    """[K] float32 bounds start, start + step, ... while below `stop`, then `stop` (the
    last step clamped, as the code's min(cur + step, max)); [start] if step is 0."""
    if step <= 0 or start >= stop:
        return np.array([start], np.float32)
    k = math.ceil((stop - start) / step - 1e-9)  # steps; the tolerance absorbs rounding
    values = [start + i * step for i in range(k)] + [stop]
    return np.asarray(values, np.float32)


def path(n_low: int, n_high: int, order: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices (low [S], high [S]) into the candidate bounds of the states the search
    visits, S = n_low + n_high - 1: one bound raised to its last, then the other."""
    lows, highs = np.arange(n_low), np.arange(n_high)
    if order == "low_first":
        return (np.concatenate([lows, np.full(n_high - 1, n_low - 1)]),
                np.concatenate([np.zeros(n_low, int), highs[1:]]))
    if order == "high_first":
        return (np.concatenate([np.zeros(n_high, int), lows[1:]]),
                np.concatenate([highs, np.full(n_low - 1, n_high - 1)]))
    raise ValueError(f"rl.loss.order must be one of {', '.join(ORDERS)}, got {order!r}")


def search(ratio, adv, mask, token_weight=None, *, target: float, lows: np.ndarray,
           highs: np.ndarray, order: str) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(c_low, c_high, share) [] each: the first state on `path` whose positive share
    is >= target, else the last (both bounds at their max). Detached.

    ratio, adv, mask, token_weight [N, T] (token_weight: u of the module docstring,
    None = 1); lows [K], highs [J] candidate bounds (`candidates`).
    """
    chex.assert_equal_shape([ratio, adv, mask])
    ratio, adv = jax.lax.stop_gradient(ratio), jax.lax.stop_gradient(adv)
    u = jnp.where(mask, jnp.abs(adv), 0.0)
    if token_weight is not None:
        u = u * jax.lax.stop_gradient(token_weight)
    u_pos, u_neg = jnp.where(adv >= 0, u, 0.0), jnp.where(adv < 0, u, 0.0)
    # one masked sum per candidate, a scan over the candidates: [N, T] memory at a time
    pos = jax.lax.map(lambda c: jnp.sum(jnp.minimum(ratio, c) * u_pos), jnp.asarray(highs))
    neg = jax.lax.map(lambda c: jnp.sum(jnp.maximum(ratio, c) * u_neg), jnp.asarray(lows))
    low_idx, high_idx = path(len(lows), len(highs), order)
    p, n = pos[high_idx], neg[low_idx]                                   # [S]
    share = jnp.where(n > 0, p / jnp.where(n > 0, p + n, 1.0), 1.0)
    met = share >= target
    at = jnp.where(jnp.any(met), jnp.argmax(met), len(low_idx) - 1)
    return (jnp.asarray(lows)[jnp.asarray(low_idx)][at],
            jnp.asarray(highs)[jnp.asarray(high_idx)][at], share[at])
