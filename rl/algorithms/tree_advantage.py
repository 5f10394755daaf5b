"""TreePO tree advantage: per-depth subgroup baselines, averaged, then whitened.

A leaf i of a sampled tree has a path of branch ids `paths[i, :depth_i]`
(the branch taken at each depth below the prompt; -1 pads past the leaf's
depth). For depth d, G_d(i) is the set of leaves of the same prompt with
depth >= d that share the first d branch ids (G_0 is the prompt's group).

level="sequence" (default; the authors' `tree_reinforce_plus_plus_baseline`,
verl/trainer/ppo/core_algos.py `compute_tree_reinforce_plus_plus_baseline_
outcome_advantage`, run by recipe/treepo/run_treepo_train.sh):

    a_{i,d} = R_i - mean(R over G_d(i))
    A_i     = mean over the used depths of a_{i,d}          (depth_weighting="average")
            or sum_d |G_d| a_{i,d} / sum_d |G_d|             (depth_weighting="size")
    used depths: d = 0 always; d > 0 only when |G_d(i)| > 1, and, with
    skip_zero_std, only when the rewards in G_d(i) are not all equal.

With a response mask [N, T], A_i is put on every response token, and with
per-token rewards r (`token_rewards` [N, T], e.g. the KL penalty -coef·KL_t of
rl.algorithms.kl.reward_penalty) their return-to-go is added, as in `reinforce_pp`:

    A_{i,t} = A_i + sum_{k >= t, mask[i, k]} r_{i,k}        (mask[i, t] true; else 0)

level="segment" (the authors' `tree_segment_reinforce_plus_plus_baseline`,
core_algos.py `compute_tree_rfpp_progress_outcome_advantage`): every segment
of a leaf gets its own advantage, the progress of the node it ends in over
its parent node. Needs the mask and `segment_len` (tokens per tree depth):

    S_i      = sum_{d=0..depth_i} w_d a_{i,d} / sum_d w_d   over ALL depths, the
               leaf's own (a = 0) and singletons included; w_d = |G_d(i)|
               (depth_weighting="size", the authors' and the default here) or 1
    V(node)  = S_i for a leaf node, else the mean of V over its children
               (bottom-up, children rather than leaves); V(prompt) = 0
    A_{i,t}  = V(n_k) - V(n_{k-1}) for t in segment k = t // segment_len + 1,
               n_k the depth-k node on leaf i's path (n_0 the prompt)

then plus the token_rewards return-to-go as above.

Finally A is whitened over the batch (`whiten=True`): over valid samples, or
over valid response tokens when a mask [N, T] is given (TreePO whitens tokens,
so longer responses weigh more). With no branching (all paths -1) the sequence
level is the group-mean baseline, i.e. `reinforce_pp_baseline` with gamma = 1
(also with token_rewards), or `dr_grpo` unwhitened.

Subgroups come from one lexicographic sort over (group, path) and a
boundary cumsum per depth: O(N log N + N·D), no Python loop over samples.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rl.algorithms import ops


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


def _token_advantages(tokens, mask, token_rewards):
    """A [N, T] -> A + sum_{k>=t} token_rewards[i, k] over the mask, 0 off it.

    mask [N, T] bool (already & valid); token_rewards [N, T] or None (then A
    itself on every masked token). The return-to-go is undiscounted, as
    `reinforce_pp` with gamma = 1.
    """
    if token_rewards is not None:
        chex.assert_equal_shape([token_rewards, mask])
        r = jnp.where(mask, ops.as_float(token_rewards), 0.0)
        tokens = tokens + ops.reverse_discounted_cumsum(r, 1.0)
    return jnp.where(mask, tokens, 0.0)


def _segment_values(rewards, index, valid, paths, depth_weighting):
    """[N, D + 1]: column d is V of leaf i's depth-d node (column 0: the prompt, 0)."""
    n, depth = paths.shape
    levels = subgroup_indices(index, paths)
    total = jnp.zeros_like(rewards)
    weight = jnp.zeros_like(rewards)
    for sub, reaches in levels:  # S_i: every depth the leaf reaches, singletons too
        member = valid & reaches
        count, mean, _ = ops.group_moments(rewards, sub, member)
        w = count if depth_weighting == "size" else jnp.ones_like(rewards)
        total = total + jnp.where(member, w * (rewards - mean), 0.0)
        weight = weight + jnp.where(member, w, 0.0)
    score = total / jnp.maximum(weight, 1e-12)
    positions = jnp.arange(n)
    values = [score] * (depth + 1)
    for d in range(depth - 1, 0, -1):  # bottom-up: a node's value is its children's mean
        child, reaches_child = levels[d + 1]
        parent = levels[d][0]
        below = valid & reaches_child
        first_seen = jax.ops.segment_min(jnp.where(below, positions, n), child, num_segments=n)
        first = below & (positions == first_seen[child])  # one leaf stands for each child
        kids = jax.ops.segment_sum(first.astype(rewards.dtype), parent, num_segments=n)[parent]
        kid_sum = jax.ops.segment_sum(jnp.where(first, values[d + 1], 0.0), parent,
                                      num_segments=n)[parent]
        values[d] = jnp.where(kids > 0, kid_sum / jnp.maximum(kids, 1.0), score)
    values[0] = jnp.zeros_like(rewards)
    return jnp.stack(values, axis=1)


def segment_advantages(rewards, index, valid, paths, mask, segment_len: int,
                       depth_weighting: str = "size") -> jax.Array:
    """[N, T] unwhitened level="segment" advantage (module docstring); 0 off the mask."""
    values = _segment_values(rewards, index, valid, paths, depth_weighting)
    per_segment = values[:, 1:] - values[:, :-1]  # [N, D]: V(n_k) - V(n_{k-1})
    segment = jnp.minimum(jnp.arange(mask.shape[1]) // segment_len, paths.shape[1] - 1)
    return jnp.where(mask, per_segment[:, segment], 0.0)


def tree(rewards, index, valid, *, paths, mask=None, token_rewards=None,
         level: str = "sequence", segment_len: int | None = None,
         depth_weighting: str | None = None, skip_zero_std: bool = False, whiten: bool = True,
         eps: float = 1e-6) -> jax.Array:
    """TreePO advantage (see module docstring).

    Args:
      paths: [N, D] int branch ids, -1 padded.
      mask: optional [N, T] response mask; the output is then [N, T]. Needed by
        level="segment".
      token_rewards: optional [N, T] per-token reward (e.g. the KL penalty
        -coef·KL from rl.algorithms.kl.reward_penalty); needs `mask`. Each masked token
        gets A + sum_{k>=t, mask} token_rewards[i, k] (the return-to-go of
        the penalty, as in reinforce_pp with gamma = 1), whitened over valid
        masked tokens when `whiten`.
      level: "sequence" (one A_i per leaf) or "segment" (one per tree segment).
      segment_len: tokens per tree depth (the sampler's tree.segment_len);
        level="segment" only.
      depth_weighting: "average" or "size"; None = "average" for the sequence
        level, "size" (the authors') for the segment level.
      skip_zero_std: sequence level only.

    Returns:
      [N] (no mask) or [N, T]; 0 on invalid samples and outside the mask.
    """
    paths = jnp.asarray(paths)
    chex.assert_rank(paths, 2)
    chex.assert_equal_shape_prefix([paths, rewards], 1)
    if level not in ("sequence", "segment"):
        raise ValueError(f"tree level must be 'sequence' or 'segment', got {level!r}")
    if depth_weighting is None:
        depth_weighting = "average" if level == "sequence" else "size"
    if depth_weighting not in ("average", "size"):
        raise ValueError(f"depth_weighting must be 'average' or 'size', got {depth_weighting!r}")
    if level == "segment":
        if mask is None:
            raise ValueError("tree level='segment' needs the response mask")
        if segment_len is None or int(segment_len) < 1:
            raise ValueError(f"tree level='segment' needs segment_len >= 1, got {segment_len}")
        if skip_zero_std:
            raise ValueError("tree: skip_zero_std applies to level='sequence' only")
        if paths.shape[1] < 1:
            raise ValueError("tree level='segment' needs paths with at least one depth")
    elif segment_len is not None:
        raise ValueError("tree: segment_len applies to level='segment' only")
    if mask is None:
        adv = _tree_baseline(rewards, index, valid, paths, depth_weighting, skip_zero_std)
        if token_rewards is not None:
            raise ValueError("tree: token_rewards needs the response mask")
        return ops.masked_whiten(adv, valid, eps) if whiten else adv
    mask = jnp.asarray(mask).astype(bool) & valid[:, None]
    chex.assert_rank(mask, 2)
    chex.assert_equal_shape_prefix([mask, rewards], 1)
    if level == "segment":
        base = segment_advantages(rewards, index, valid, paths, mask, int(segment_len),
                                  depth_weighting)
    else:
        adv = _tree_baseline(rewards, index, valid, paths, depth_weighting, skip_zero_std)
        base = jnp.broadcast_to(adv[:, None], mask.shape)
    tokens = _token_advantages(base, mask, token_rewards)
    return ops.masked_whiten(tokens, mask, eps) if whiten else tokens
