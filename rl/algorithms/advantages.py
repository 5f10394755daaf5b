"""Advantage estimators, selected by name: `compute("grpo", rewards, group_ids)`.

Every estimator maps per-sample rewards `[N]` and group ids `[N]` (the prompt
each sample answers; any integers) to advantages: `[N]`, or `[N, T]` for the
token-level forms that take a response `mask`. Samples with `valid=False`
(batch padding, filtered groups) are left out of every statistic and get 0.

Estimators (formulas in docs/algorithms.md):
  grpo           (R - mean_g) / (std_g + eps)
  dr_grpo        R - mean_g
  rloo           R - mean of the other members of the group
  reinforce_pp   global whitening (REINFORCE++); `baseline=True` subtracts the
                 group mean first (registered also as `reinforce_pp_baseline`)
  mc_grpo        (R - median) / (MAD + 1e-3) over the G+1 samples of the group
                 (the trainer samples the extra one), one pivot per group
                 excluded from the gradient (`gradient_mask`)
  tree           TreePO per-depth subgroup baselines (rl/algorithms/tree_advantage.py)
  seeupo         R - mean_g, standardised over the batch, clipped (rl/algorithms/seeupo.py)

Token-level reweighters (fipo, logp_reweight, divergence_weighted) compose on
top of any of these: `reweight(name, adv, mask, ...)` from rl/algorithms/reweighting.py.
All functions are jit-compatible (string/keyword options static).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp

from rl.algorithms import ops, seeupo, tree_advantage
from rl.algorithms.reweighting import reweight  # noqa: F401  (re-exported)
from rl.registry import Registry, check_kwargs


@dataclasses.dataclass(frozen=True)
class Estimator:
    """An advantage function and, optionally, which samples enter the gradient."""

    advantage: Callable[..., jax.Array]
    keep: Callable[..., jax.Array] | None = None


ESTIMATORS: Registry[Estimator] = Registry("advantage estimator")


def register(*names: str, keep: Callable[..., jax.Array] | None = None):
    """Decorator: registers `fn(rewards, index, valid, **options)` under `names`."""

    def add(fn):
        ESTIMATORS.register(*names)(Estimator(fn, keep))
        return fn

    return add


def _prepare(rewards, group_ids, valid):
    rewards = ops.as_float(rewards)
    group_ids = jnp.asarray(group_ids)
    chex.assert_rank(rewards, 1)
    chex.assert_shape(group_ids, rewards.shape)
    if not jnp.issubdtype(group_ids.dtype, jnp.integer):
        raise TypeError(f"group_ids must be integers, got {group_ids.dtype}")
    valid = (jnp.ones(rewards.shape, bool) if valid is None
             else jnp.asarray(valid).astype(bool))
    chex.assert_shape(valid, rewards.shape)
    return rewards, ops.group_index(group_ids), valid


def compute(name: str, rewards, group_ids, *, valid=None, **kwargs) -> jax.Array:
    """Advantages of estimator `name`.

    Args:
      rewards: [N] scalar reward per sample.
      group_ids: [N] integer id of each sample's group (prompt).
      valid: optional [N] bool; invalid samples are ignored and get 0.
      **kwargs: the estimator's options (see its docstring); unknown ones raise.

    Returns:
      [N] advantages, or [N, T] for token-level forms given `mask=[N, T]`.
    """
    estimator = ESTIMATORS.get(name)
    check_kwargs("advantage estimator", name, estimator.advantage, kwargs)
    rewards, index, valid = _prepare(rewards, group_ids, valid)
    return estimator.advantage(rewards, index, valid, **kwargs)


def gradient_mask(name: str, rewards, group_ids, *, valid=None) -> jax.Array:
    """[N] bool: the samples whose loss enters the gradient under estimator `name`.

    `valid` for every estimator except mc_grpo, which also drops one pivot per group.
    Multiply it into the response mask before the loss.
    """
    estimator = ESTIMATORS.get(name)
    rewards, index, valid = _prepare(rewards, group_ids, valid)
    if estimator.keep is None:
        return valid
    return estimator.keep(rewards, index, valid)


def names() -> list[str]:
    return ESTIMATORS.names()


@register("grpo", "dapo")
def _grpo(rewards, index, valid, *, eps: float = 1e-6, ddof: int = 1,
          std_scope: str = "group") -> jax.Array:
    """(R - mean_g) / (std_g + eps). `ddof=1` is the unbiased std (verl, TRL);
    `std_scope="batch"` divides by the std of all valid rewards instead."""
    _, mean, std = ops.group_moments(rewards, index, valid, ddof)
    if std_scope == "batch":
        std = jnp.sqrt(ops.masked_var(rewards, valid, ddof))
    elif std_scope != "group":
        raise ValueError(f"std_scope must be 'group' or 'batch', got {std_scope!r}")
    return jnp.where(valid, (rewards - mean) / (std + eps), 0.0)


@register("dr_grpo")
def _dr_grpo(rewards, index, valid) -> jax.Array:
    """R - mean_g (Dr.GRPO: no std normalisation)."""
    _, mean, _ = ops.group_moments(rewards, index, valid)
    return jnp.where(valid, rewards - mean, 0.0)


@register("rloo")
def _rloo(rewards, index, valid) -> jax.Array:
    """R_i - mean_{j != i} R_j over the group; 0 for a group of one."""
    count = ops.group_sum(jnp.ones_like(rewards), index, valid)
    total = ops.group_sum(rewards, index, valid)
    others = (total - rewards) / jnp.maximum(count - 1, 1)
    return jnp.where(valid & (count > 1), rewards - others, 0.0)


@register("reinforce_pp")
def _reinforce_pp(rewards, index, valid, *, baseline: bool = False, mask=None,
                  token_rewards=None, gamma: float = 1.0, eps: float = 1e-6) -> jax.Array:
    """REINFORCE++: whitening across the whole batch.

    Without `mask`: whitens R (minus the group mean if `baseline`) over the valid
    samples -> [N]. With `mask` [N, T]: per-token returns
    G_t = sum_{k>=t} gamma^(k-t) r_k, where r is `token_rewards` [N, T] (e.g. a KL
    penalty from rl.algorithms.kl.reward_penalty, default 0) plus the sequence reward on the
    last response token, whitened over all valid tokens -> [N, T].
    """
    score = rewards
    if baseline:
        _, mean, _ = ops.group_moments(rewards, index, valid)
        score = rewards - mean
    if mask is None:
        if token_rewards is not None:
            raise ValueError("reinforce_pp: token_rewards needs the response mask")
        return ops.masked_whiten(score, valid, eps)
    mask = jnp.asarray(mask).astype(bool) & valid[:, None]
    chex.assert_rank(mask, 2)
    chex.assert_equal_shape_prefix([mask, score], 1)
    length = jnp.sum(mask, axis=1)
    positions = jnp.arange(mask.shape[1])
    last = (positions[None, :] == (length - 1)[:, None]) & mask
    r = jnp.where(last, score[:, None], 0.0)
    if token_rewards is not None:
        chex.assert_equal_shape([token_rewards, mask])
        r = r + jnp.where(mask, ops.as_float(token_rewards), 0.0)
    returns = ops.reverse_discounted_cumsum(r, gamma)
    return ops.masked_whiten(returns, mask, eps)



@register("reinforce_pp_baseline")
def _reinforce_pp_baseline(rewards, index, valid, *, mask=None, token_rewards=None,
                           gamma: float = 1.0, eps: float = 1e-6) -> jax.Array:
    """REINFORCE++-baseline: group mean subtracted, then global whitening."""
    return _reinforce_pp(rewards, index, valid, baseline=True, mask=mask,
                         token_rewards=token_rewards, gamma=gamma, eps=eps)



def _median_pivot(rewards, index, valid):
    """Per-sample (group median reward, is-pivot) with the lower median.

    Sorting by (group, reward, position) puts each group's members in a run;
    the pivot is the member at rank floor((count - 1) / 2) of its run, so for
    an odd group (G+1 samples, G even) it is the exact median.
    """
    n = rewards.shape[0]
    key_group = jnp.where(valid, index, n)  # invalid samples sort last
    order = jnp.lexsort((jnp.arange(n), rewards, key_group))
    sorted_group = key_group[order]
    positions = jnp.arange(n)
    starts = jax.ops.segment_min(positions, sorted_group, num_segments=n + 1)
    counts = jax.ops.segment_sum(jnp.ones(n, jnp.int32), sorted_group, num_segments=n + 1)
    rank = positions - starts[sorted_group]
    pivot_sorted = rank == (counts[sorted_group] - 1) // 2
    pivot = jnp.zeros(n, bool).at[order].set(pivot_sorted) & valid
    median = ops.group_sum(jnp.where(pivot, rewards, 0.0), index, valid)
    return median, pivot


def _mc_grpo_keep(rewards, index, valid) -> jax.Array:
    _, pivot = _median_pivot(rewards, index, valid)
    return valid & ~pivot


MAD_EPS = 1e-3  # MC-GRPO's authors: (R - median) / (MAD + 1e-3)


@register("mc_grpo", keep=_mc_grpo_keep)
def _mc_grpo(rewards, index, valid, *, scale: str = "mad", eps: float | None = None,
             ddof: int = 1) -> jax.Array:
    """R - median over the group's G+1 samples, scaled by `scale`:
    "mad" (the authors' default): / (MAD + eps), MAD = median_g |R - median_g|,
    eps = 1e-3; "group": / (std_g + eps) over all G+1, eps = 1e-6, as GRPO;
    "none": the raw difference. The pivot (the median sample) gets 0."""
    median, pivot = _median_pivot(rewards, index, valid)
    adv = rewards - median
    if scale == "mad":
        mad, _ = _median_pivot(jnp.abs(adv), index, valid)
        adv = adv / (mad + (MAD_EPS if eps is None else eps))
    elif scale == "group":
        _, _, std = ops.group_moments(rewards, index, valid, ddof)
        adv = adv / (std + (1e-6 if eps is None else eps))
    elif scale != "none":
        raise ValueError(f"mc_grpo scale must be 'mad', 'group' or 'none', got {scale!r}")
    return jnp.where(valid & ~pivot, adv, 0.0)


register("tree")(tree_advantage.tree)  # TreePO (rl/algorithms/tree_advantage.py)
register("seeupo")(seeupo.advantage)  # SeeUPO's GRAE (rl/algorithms/seeupo.py)
