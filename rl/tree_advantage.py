"""TreePO tree advantage: per-depth subgroup baselines, averaged, then whitened.

A leaf i of a sampled tree has a path of branch ids `paths[i, :depth_i]`
(the branch taken at each depth below the prompt; -1 pads past the leaf's
depth). For depth d, G_d(i) is the set of leaves of the same prompt with
depth >= d that share the first d branch ids (G_0 is the prompt's group).

    a_{i,d} = R_i - mean(R over G_d(i))
    A_i     = mean over the used depths of a_{i,d}          (depth_weighting="average")
            or sum_d |G_d| a_{i,d} / sum_d |G_d|             (depth_weighting="size")
    used depths: d = 0 always; d > 0 only when |G_d(i)| > 1, and, with
    skip_zero_std, only when the rewards in G_d(i) are not all equal.

With a response mask [N, T], A_i is put on every response token, and with
per-token rewards r (`token_rewards` [N, T], e.g. the KL penalty -coef·KL_t of
rl.kl.reward_penalty) their return-to-go is added, as in `reinforce_pp`:

    A_{i,t} = A_i + sum_{k >= t, mask[i, k]} r_{i,k}        (mask[i, t] true; else 0)

Finally A is whitened over the batch (`whiten=True`): over valid samples, or
over valid response tokens when a mask [N, T] is given (TreePO whitens tokens,
so longer responses weigh more). With no branching (all paths -1) the result is
the group-mean baseline, i.e. `reinforce_pp_baseline` with gamma = 1 (also with
token_rewards), or `dr_grpo` unwhitened.

Subgroups come from one lexicographic sort over (group, path) and a
boundary cumsum per depth: O(N log N + N·D), no Python loop over samples.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rl import ops
from rl.advantages import register


def subgroup_indices(index: jax.Array, paths: jax.Array) -> list[tuple[jax.Array, jax.Array]]:
    """Per depth d in [0, D]: (dense subgroup id [N], bool [N] leaf depth >= d).

    One lexicographic sort by (group, path[0], ..., path[D-1]) puts the
    leaves sharing any prefix in one run; the runs at depth d start where the
    group or one of the first d branch ids changes. Leaves not reaching d
    (-1 there) form their own runs and are masked by the second output.

    Args:
      index: [N] dense group index.
      paths: [N, D] int branch ids, -1 past each leaf's depth.
    """
    n, depth = paths.shape
    keys = [index] + [paths[:, k] for k in range(depth)]
    order = jnp.lexsort(keys[::-1])  # lexsort's last key is the primary one
    changed = jnp.zeros(n, bool).at[0].set(True)
    out = []
    for d, key in enumerate(keys):  # static loop over tree depth
        sorted_key = key[order]
        changed = changed | jnp.concatenate([jnp.ones(1, bool),
                                             sorted_key[1:] != sorted_key[:-1]])
        sub = jnp.zeros(n, jnp.int32).at[order].set(jnp.cumsum(changed) - 1)
        out.append((sub, jnp.ones(n, bool) if d == 0 else paths[:, d - 1] >= 0))
    return out


def _tree_baseline(rewards, index, valid, paths, depth_weighting, skip_zero_std):
    """[N] unwhitened tree advantage A_i (module docstring); 0 where not valid."""
    total = jnp.zeros_like(rewards)
    weight = jnp.zeros_like(rewards)
    for depth, (sub, reaches) in enumerate(subgroup_indices(index, paths)):
        member = valid & reaches
        count, mean, std = ops.group_moments(rewards, sub, member)
        used = member if depth == 0 else member & (count > 1)
        if skip_zero_std and depth > 0:
            used = used & (std > 0)
        w = jnp.ones_like(rewards) if depth_weighting == "average" else count
        total = total + jnp.where(used, w * (rewards - mean), 0.0)
        weight = weight + jnp.where(used, w, 0.0)
    return jnp.where(valid, total / jnp.maximum(weight, 1e-12), 0.0)


def _token_advantages(adv, mask, token_rewards):
    """A_i [N] -> [N, T]: A_i + sum_{k>=t} token_rewards[i, k] over the mask, 0 off it.

    mask [N, T] bool (already & valid); token_rewards [N, T] or None (then A_i
    on every masked token). The return-to-go is undiscounted, as
    `reinforce_pp` with gamma = 1.
    """
    tokens = jnp.broadcast_to(adv[:, None], mask.shape)
    if token_rewards is not None:
        chex.assert_equal_shape([token_rewards, mask])
        r = jnp.where(mask, ops.as_float(token_rewards), 0.0)
        tokens = tokens + ops.reverse_discounted_cumsum(r, 1.0)
    return jnp.where(mask, tokens, 0.0)


@register("tree")
def tree(rewards, index, valid, *, paths, mask=None, token_rewards=None,
         depth_weighting: str = "average", skip_zero_std: bool = False, whiten: bool = True,
         eps: float = 1e-6) -> jax.Array:
    """TreePO advantage (see module docstring).

    Args:
      paths: [N, D] int branch ids, -1 padded.
      mask: optional [N, T] response mask; the output is then [N, T].
      token_rewards: optional [N, T] per-token reward (e.g. the KL penalty
        -coef·KL from rl.kl.reward_penalty); needs `mask`. Each masked token
        gets A_i + sum_{k>=t, mask} token_rewards[i, k] (the return-to-go of
        the penalty, as in reinforce_pp with gamma = 1), whitened over valid
        masked tokens when `whiten`.

    Returns:
      [N] (no mask) or [N, T]; 0 on invalid samples and outside the mask.
    """
    paths = jnp.asarray(paths)
    chex.assert_rank(paths, 2)
    chex.assert_equal_shape_prefix([paths, rewards], 1)
    if depth_weighting not in ("average", "size"):
        raise ValueError(f"depth_weighting must be 'average' or 'size', got {depth_weighting!r}")
    adv = _tree_baseline(rewards, index, valid, paths, depth_weighting, skip_zero_std)
    if mask is None:
        if token_rewards is not None:
            raise ValueError("tree: token_rewards needs the response mask")
        return ops.masked_whiten(adv, valid, eps) if whiten else adv
    mask = jnp.asarray(mask).astype(bool) & valid[:, None]
    chex.assert_rank(mask, 2)
    chex.assert_equal_shape_prefix([mask, adv], 1)
    tokens = _token_advantages(adv, mask, token_rewards)
    return ops.masked_whiten(tokens, mask, eps) if whiten else tokens
