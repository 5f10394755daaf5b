"""Algorithm variants, selectable as `configs/<file>.py:<variant>`.

    python -m launch.train --config=configs/demo.py:dapo --workdir=/tmp/dapo
    python -m launch.train --config=configs/base.py:small,gspo --workdir=...

Each variant edits the `rl` (and where the method needs it, `train`)
sections of a config built by `configs.base.build`, to the published
method's defaults. Anything a variant sets can still be overridden on the
command line. Formulas and sources: docs/algorithms.md.

  grpo          group-whitened advantage, PPO clip 0.2, per-sequence token
                mean, k3 KL to the reference at β = 0.04 (DeepSeekMath)
  dr_grpo       mean-centred advantage, token sums over a constant length,
                no KL (Dr.GRPO)
  dapo          clip-higher (0.2 / 0.28), token-mean loss, dynamic sampling,
                no KL (DAPO; overlong shaping is not included)
  gspo          sequence-level ratio clipped at 3e-4 / 4e-4, no KL (GSPO)
  rloo          leave-one-out baseline, k1 KL folded into the reward (RLOO)
  reinforce_pp  token-level returns whitened over the batch, k1 KL in the
                reward (REINFORCE++)
"""

from __future__ import annotations

import ml_collections


def _grpo(c):
    c.rl.advantage.name = "grpo"
    c.rl.loss.name = "ppo"
    c.rl.loss.agg = "seq_mean_token_mean"
    c.rl.kl.kind, c.rl.kl.coef = "k3", 0.04


def _dr_grpo(c):
    c.rl.advantage.name = "dr_grpo"
    c.rl.loss.name = "ppo"
    c.rl.loss.agg = "seq_mean_token_sum_norm"
    c.rl.kl.coef = 0.0


def _dapo(c):
    c.rl.advantage.name = "dapo"
    c.rl.loss.name = "ppo"
    c.rl.loss.agg = "token_mean"
    c.rl.loss.eps_low, c.rl.loss.eps_high = 0.2, 0.28
    c.rl.kl.coef = 0.0
    c.train.dynamic_sampling = True


def _gspo(c):
    c.rl.advantage.name = "grpo"
    c.rl.loss.name = "gspo"
    c.rl.loss.agg = "seq_mean_token_mean"
    c.rl.loss.eps_low, c.rl.loss.eps_high = 3e-4, 4e-4
    c.rl.kl.coef = 0.0


def _rloo(c):
    c.rl.advantage.name = "rloo"
    c.rl.loss.name = "ppo"
    c.rl.loss.agg = "token_mean"
    c.rl.kl.kind, c.rl.kl.coef, c.rl.kl.in_reward = "k1", 0.04, True


def _reinforce_pp(c):
    c.rl.advantage.name = "reinforce_pp"
    c.rl.loss.name = "ppo"
    c.rl.loss.agg = "token_mean"
    c.rl.kl.kind, c.rl.kl.coef, c.rl.kl.in_reward = "k1", 0.01, True


VARIANTS = {"grpo": _grpo, "dr_grpo": _dr_grpo, "dapo": _dapo, "gspo": _gspo,
            "rloo": _rloo, "reinforce_pp": _reinforce_pp}


def apply(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
    """Sets variant `name` on an (unlocked or locked) config in place."""
    if name not in VARIANTS:
        raise ValueError(f"unknown algorithm variant {name!r} (choose from "
                         f"{', '.join(VARIANTS)})")
    VARIANTS[name](config)
    return config
