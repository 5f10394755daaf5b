"""SeeUPO (Hu et al. 2026, arXiv 2602.06554): a multi-turn episode as a sequence of
single-turn bandits, updated turn by turn in reverse order (backward induction).

Its authors' code (modelscope/AgentEvolver, branch `seeupo`) does, per training step:

    A = advantage("seeupo", R, group)         # once per episode, the same for every turn
    F = 1                                     # per episode, detached
    for k in turn_order(K, "reverse"):        # K-1, ..., 0: one optimizer step per turn
        old = log π(turn k's tokens)          # recomputed: the later turns are updated
        step on the turn-k loss with advantage A·F on turn k's tokens
        new = log π(turn k's tokens)
        F = update_factor(F, sequence_log_ratio(new, old, turn k's mask))

This module holds the numerics of that loop (each with a NumPy reference test):

  advantage "seeupo"   a_i = R_i - mean of its group (a group of one: no centring), then
                       standardised over the batch (unbiased std; only centred when the
                       std is <= `std_floor`), then clipped to ±`clip` (GRAE with the
                       paper's batch-level normalisation)
  sequence_log_ratio   l_i = clip(mean over the turn's mask of (new - old), ±`bound`)
  update_factor        F_i <- clip(F_i · clip(exp l_i, 1 - low, 1 + high), 1 - low, 1 + high);
                       rows with no token in the turn keep their factor (the authors' code
                       scales them by the ratio of a padding row; docs/algorithms.md)
  turn_order           "reverse" (SeeUPO) or "sequential"
  turn_mask            [N, T] the tokens of turn k, from per-token turn ids

Formulas, constants and where this differs from the code: docs/algorithms.md, "SeeUPO".
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rl.algorithms import ops

ORDERS = ("reverse", "sequential")


def advantage(rewards, index, valid, *, clip: float = 3.0, std_floor: float = 1e-6,
              ddof: int = 1) -> jax.Array:
    """The `seeupo` estimator (registered in `rl.algorithms.advantages`). [N]: R - mean_g (no centring for a group of one), standardised over the valid
    samples of the batch, clipped to ±clip."""
    count, mean, _ = ops.group_moments(rewards, index, valid)
    centred = jnp.where(valid, rewards - jnp.where(count > 1, mean, 0.0), 0.0)
    batch_mean = ops.masked_mean(centred, valid)
    std = jnp.sqrt(ops.masked_var(centred, valid, ddof))
    scaled = jnp.where(std > std_floor, (centred - batch_mean) / jnp.maximum(std, std_floor),
                       centred - batch_mean)
    return jnp.where(valid, jnp.clip(scaled, -clip, clip), 0.0)


def sequence_log_ratio(new_logp: jax.Array, old_logp: jax.Array, mask: jax.Array, *,
                       bound: float = 10.0) -> jax.Array:
    """[N]: the mean over each row's `mask` [N, T] of new - old log-probs [N, T] (a row
    with no token: 0), clipped to ±bound."""
    chex.assert_equal_shape([new_logp, old_logp, mask])
    return jnp.clip(ops.masked_mean(new_logp - old_logp, mask.astype(bool), axis=-1),
                    -bound, bound)


def update_factor(factor: jax.Array, log_ratio: jax.Array, present: jax.Array, *,
                  low: float = 0.2, high: float = 0.2) -> jax.Array:
    """[N] the factor after a turn: times the turn's clipped sequence ratio, clipped
    again; rows not `present` in the turn [N] keep theirs. Detached."""
    chex.assert_equal_shape([factor, log_ratio, present])
    rho = jnp.clip(jnp.exp(log_ratio), 1.0 - low, 1.0 + high)
    new = jnp.clip(factor * rho, 1.0 - low, 1.0 + high)
    return jax.lax.stop_gradient(jnp.where(present, new, factor))


def turn_order(turns: int, order: str = "reverse") -> list[int]:
    """The turns in the order they are updated."""
    if turns < 1:
        raise ValueError(f"turns must be >= 1, got {turns}")
    if order not in ORDERS:
        raise ValueError(f"rl.multiturn.order must be one of {', '.join(ORDERS)}, got {order!r}")
    return list(range(turns))[::-1] if order == "reverse" else list(range(turns))


def turn_mask(turn_ids: jax.Array, mask: jax.Array, turn: int) -> jax.Array:
    """[N, T] bool: the loss tokens of turn `turn`; `turn_ids` [N, T] is each token's
    policy turn (0-based; anything on the environment's tokens, which `mask` excludes)."""
    chex.assert_equal_shape([turn_ids, mask])
    return (turn_ids == turn) & mask.astype(bool)
