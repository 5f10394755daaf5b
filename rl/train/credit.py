"""Credit for one RL step: from the kept groups' rewards to per-token advantages.

    credit = Credit(run.algorithm, run.tree, rows=P·G, completion_len=C)
    shaping = credit.shape_rewards(groups)      # DAPO's overlong penalty, host side
    adv, grad_mask, weight, kl = credit(groups, seqs, old_logp, ref_logp, step=step)

One compiled kernel does the device part: the KL penalty in the reward
(`rl.kl.in_reward`: folded into each sequence's reward, or a per-token reward for the
token-level estimators), the advantage estimator (`rl.algorithms.advantages`), the
gradient mask (mc_grpo's pivot, the overlong filter), and the token reweighting that
does not depend on π_θ (logp_reweight, delta_logp_mask, divergence_weighted; FIPO
reweights inside the loss).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from models.multihost import to_host
from rl.algorithms import advantages as adv_lib
from rl.algorithms import kl as kl_lib
from rl.algorithms import ops, overlong, reweighting
from rl.algorithms.algorithm import Algorithm
from rl.train.groups import Groups
from sampling import TreeConfig

TOKEN_LEVEL = ("reinforce_pp", "reinforce_pp_baseline", "tree")


class Credit:
    """The step's advantages for `rows` batch rows of completions of up to
    `completion_len` tokens (see the module docstring)."""

    def __init__(self, alg: Algorithm, tree: TreeConfig | None, rows: int,
                 completion_len: int):
        self.alg, self.tree, self.rows, self.completion_len = alg, tree, rows, completion_len
        self._kernel = jax.jit(self.kernel)

    # -- advantages ---------------------------------------------------------------------------
    def kernel(self, rewards, gids, valid, mask, old_logp, ref_logp, paths, step,
                         divergence, keep_rows):
        """Jitted: rewards/gids/valid/keep_rows [rows], mask/old_logp/ref_logp/divergence
        [rows, C] (divergence None unless divergence_weighted uses JS), paths [rows, depth]
        or None, step [] the RL step -> ([rows, C] advantages, [rows, C] gradient mask,
        [rows, C] the reweighter's token weight, 1 without one, [] the mean KL estimate
        over the valid rows' tokens when the KL is in the reward, else 0)."""
        alg = self.alg
        opts = dict(alg.advantage_options)
        kl_mean = jnp.float32(0.0)
        if alg.kl_in_reward and alg.kl_coef > 0:
            penalty = kl_lib.reward_penalty(alg.kl_kind, old_logp, ref_logp, mask, alg.kl_coef,
                                            clamp=alg.kl_clamp)
            kl_mean = ops.masked_mean(-penalty / alg.kl_coef, mask & valid[:, None])
            if alg.advantage in TOKEN_LEVEL:
                opts["token_rewards"] = penalty
            else:
                rewards = rewards + jnp.sum(penalty, axis=1)
        if alg.advantage in TOKEN_LEVEL:
            opts["mask"] = mask
        if paths is not None:
            opts["paths"] = paths
        if opts.get("level") == "segment":
            opts["segment_len"] = self.tree.segment_len
        adv = adv_lib.compute(alg.advantage, rewards, gids, valid=valid, **opts)
        keep = adv_lib.gradient_mask(alg.advantage, rewards, gids, valid=valid)
        grad_mask = mask & (keep & keep_rows)[:, None]  # keep_rows: the overlong filter
        weight = jnp.ones(mask.shape, jnp.float32)
        if alg.reweight and alg.reweight != "fipo":
            options = dict(alg.reweight_options)
            if alg.reweight == "logp_reweight":
                inputs = {"old_logp": old_logp}
            elif alg.reweight == "delta_logp_mask":
                inputs = {"old_logp": old_logp, "ref_logp": ref_logp, "step": step}
            elif options.get("divergence", "js") == "js":  # full-vocabulary JS(π_old‖π_ref)
                inputs = {"token_divergence": divergence}
            else:  # k3 estimate of KL(π_old‖π_ref) at the sampled token
                inputs = {"token_divergence": kl_lib.estimate("k3", old_logp, ref_logp)}
            adv, weight = reweighting.weight(alg.reweight, adv, grad_mask, **inputs, **options)
            adv = adv * weight
            if alg.reweight == "delta_logp_mask" and options.get("method", "clip") == "clip":
                grad_mask = grad_mask & (weight > 0)  # the authors' method=clip: out of the loss
        adv = jnp.broadcast_to(adv.astype(jnp.float32).reshape(mask.shape[0], -1), mask.shape)
        return jnp.where(grad_mask, adv, 0.0), grad_mask, weight, kl_mean

    def __call__(self, groups: Groups, seqs, old_logp, ref_logp, *, step: int = 0,
                 divergence=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """([rows, C] advantages, [rows, C] gradient mask, [rows, C] reweighting weight,
        the KL-in-reward's mean estimate) for the assembled batch
        (one compiled program: estimator, KL-in-reward, mc_grpo mask, overlong filter,
        reweighting)."""
        n = len(groups.rewards)
        rewards = np.zeros(self.rows, np.float32)
        rewards[:n] = groups.rewards
        gids = np.full(self.rows, -1, np.int32)
        gids[:n] = groups.group_ids
        keep_rows = np.ones(self.rows, bool)
        if self.alg.overlong_filter:
            keep_rows[:n] = ~np.asarray(groups.truncated, bool)
        paths = None
        if self.alg.advantage == "tree":
            paths = np.full((self.rows, self.tree.max_depth), -1, np.int32)
            for i, row in enumerate(groups.paths):
                paths[i, :len(row)] = row
        out = self._kernel(rewards, gids, seqs.valid, seqs.mask, old_logp, ref_logp,
                               paths, np.int32(step), divergence, keep_rows)
        return to_host(out)

    def shape_rewards(self, groups: Groups) -> dict[str, float]:
        """Adds DAPO's soft overlong penalty to the kept rewards (correctness unchanged);
        returns its statistics and the overlong filter's."""
        alg, out = self.alg, {}
        if alg.overlong_buffer:
            lengths = np.array([len(c) for c in groups.completions])
            penalty = overlong.penalty(lengths, max_len=self.completion_len,
                                       buffer=alg.overlong_buffer, factor=alg.overlong_factor)
            groups.rewards = [r + float(p) for r, p in zip(groups.rewards, penalty, strict=True)]
            out = {"overlong/penalty_mean": float(penalty.mean()),
                   "overlong/penalized_frac": float(np.mean(penalty < 0))}
        if alg.overlong_filter:
            out["overlong/filtered_frac"] = float(np.mean(groups.truncated))
        return out

    def reweight_metrics(self, seqs, grad_mask, weight, divergence) -> dict[str, float]:
        """The reweighter's token weights over the kept rows' tokens: mean, and the
        fraction it zeroes (delta_logp_mask); the mean JS when divergence_weighted uses it.
        (FIPO's weights depend on π_θ: the learner logs them as learner/fipo_*.)"""
        tokens = seqs.mask & seqs.valid[:, None]
        if self.alg.reweight in (None, "fipo") or not tokens.any():
            return {}
        out = {"reweight/weight_mean": float(weight[tokens & grad_mask].mean())
               if (tokens & grad_mask).any() else 0.0,
               "reweight/zeroed_frac": float(np.mean((weight == 0)[tokens]))}
        if divergence is not None:
            out["reweight/js_mean"] = float(to_host(divergence)[tokens].mean())
        return out
