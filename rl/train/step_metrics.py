"""A step's logged metrics: the batch's rewards, accuracy and lengths, and the update's."""

from __future__ import annotations

import numpy as np

from rl.algorithms.algorithm import Algorithm
from rl.train.groups import Groups


def learner(metrics: dict, alg: Algorithm, kl_mean: float) -> dict[str, float]:
    """The update's metrics as learner/*, the headline ones also without the prefix,
    and the KL when it is in the reward (the loss then has no KL term to log)."""
    out = {f"learner/{k}": float(v) for k, v in metrics.items()}
    for key in ("kl", "entropy", "grad_norm", "clip_frac_low", "clip_frac_high"):
        if f"learner/{key}" in out:
            out[key] = out[f"learner/{key}"]
    if alg.kl_in_reward and alg.kl_coef > 0:
        out["kl"] = out["kl/in_reward"] = float(kl_mean)
        out["kl/reward_penalty"] = -alg.kl_coef * float(kl_mean)
    return out


def batch(groups: Groups, adv: np.ndarray, grad_mask: np.ndarray) -> dict[str, float]:
    """Rewards, accuracy and lengths of the step's real rows (DARS pads its groups with
    invalid rows), and the mean |advantage| over the trained tokens."""
    real = np.asarray(groups.valid, bool)
    n = int(real.sum())
    rewards = np.asarray(groups.rewards, np.float32)[real]
    correct = np.asarray(groups.correct, bool)[real]
    lengths = np.array([len(c) for c in groups.completions])[real] if n else np.zeros(1)
    return {
        "reward/mean": float(rewards.mean()) if n else 0.0,
        "reward/std": float(rewards.std()) if n else 0.0,
        "accuracy": float(np.mean(correct)) if n else 0.0,
        "response_length/mean": float(lengths.mean()),
        "response_length/max": int(lengths.max()),
        "response_length/truncated_frac": (float(np.mean(np.asarray(groups.truncated)[real]))
                                           if n else 0.0),
        "batch/rows": n, "update/skipped": 0,
        "advantage/abs_mean": float(np.abs(adv[grad_mask]).mean()) if grad_mask.any() else 0.0,
    }
