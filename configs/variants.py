"""Algorithm variants, selectable as `configs/<file>.py:<variant>`.

    python -m launch.train --config=configs/demo.py:dapo --workdir=/tmp/dapo
    python -m launch.train --config=configs/base.py:small,gspo --workdir=...

Each variant edits the `rl` and `train` sections of a config built by
`configs.base.build` to the published method's defaults, including its
update schedule: how many optimizer steps each rollout batch gets
(`train.minibatches`, capped at `train.prompts_per_step` because a
minibatch is whole prompt groups). Apply a variant after setting
`prompts_per_step`. Anything a variant sets can still be overridden on the
command line. Formulas and sources: docs/algorithms.md.

  grpo          group-whitened advantage, PPO clip 0.2, per-sequence token
                mean, k3 KL to the reference at β = 0.04; one on-policy
                update per rollout batch (DeepSeekMath)
  dr_grpo       mean-centred advantage, token sums over a constant length,
                no KL; one update per batch (Dr.GRPO)
  dapo          clip-higher (0.2 / 0.28) with dual clip 10, token-mean loss,
                dynamic sampling, no KL; 16 minibatches per rollout batch (the
                authors' 512 prompts / 32 per minibatch). Overlong shaping is
                not included.
  gspo          sequence-level ratio clipped at 3e-4 / 4e-4, no KL; 4
                minibatches per rollout batch (GSPO)
  rloo          leave-one-out baseline, k1 KL folded into the reward; one
                on-policy update (RLOO is REINFORCE with a baseline)
  reinforce_pp  token-level returns whitened over the batch, k1 KL in the
                reward; 8 minibatches per rollout batch (OpenRLHF's example:
                1,024 rollouts, 128 per optimizer step)
"""

from __future__ import annotations

import ml_collections


def _minibatches(c, authors: int) -> None:
    """The authors' optimizer steps per rollout batch, scaled to the batch: the
    largest count <= `authors` that splits prompts_per_step into whole groups."""
    groups = c.train.prompts_per_step
    c.train.epochs = 1
    c.train.minibatches = max(m for m in range(1, min(authors, groups) + 1) if groups % m == 0)


def _grpo(c):
    c.rl.advantage.name = "grpo"
    c.rl.loss.name = "ppo"
    c.rl.loss.agg = "seq_mean_token_mean"
    c.rl.kl.kind, c.rl.kl.coef = "k3", 0.04
    _minibatches(c, 1)


def _dr_grpo(c):
    c.rl.advantage.name = "dr_grpo"
    c.rl.loss.name = "ppo"
    c.rl.loss.agg = "seq_mean_token_sum_norm"
    c.rl.kl.coef = 0.0
    _minibatches(c, 1)


def _dapo(c):
    c.rl.advantage.name = "dapo"
    c.rl.loss.name = "ppo"
    c.rl.loss.agg = "token_mean"
    c.rl.loss.eps_low, c.rl.loss.eps_high, c.rl.loss.dual_clip = 0.2, 0.28, 10.0
    c.rl.kl.coef = 0.0
    c.train.dynamic_sampling = True
    _minibatches(c, 16)


def _gspo(c):
    c.rl.advantage.name = "grpo"
    c.rl.loss.name = "gspo"
    c.rl.loss.agg = "seq_mean_token_mean"
    c.rl.loss.eps_low, c.rl.loss.eps_high = 3e-4, 4e-4
    c.rl.kl.coef = 0.0
    _minibatches(c, 4)


def _rloo(c):
    c.rl.advantage.name = "rloo"
    c.rl.loss.name = "ppo"
    c.rl.loss.agg = "token_mean"
    c.rl.kl.kind, c.rl.kl.coef, c.rl.kl.in_reward = "k1", 0.04, True
    _minibatches(c, 1)


def _reinforce_pp(c):
    c.rl.advantage.name = "reinforce_pp"
    c.rl.loss.name = "ppo"
    c.rl.loss.agg = "token_mean"
    c.rl.kl.kind, c.rl.kl.coef, c.rl.kl.in_reward = "k1", 0.01, True
    _minibatches(c, 8)


VARIANTS = {"grpo": _grpo, "dr_grpo": _dr_grpo, "dapo": _dapo, "gspo": _gspo,
            "rloo": _rloo, "reinforce_pp": _reinforce_pp}


def apply(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
    """Sets variant `name` on an (unlocked or locked) config in place."""
    if name not in VARIANTS:
        raise ValueError(f"unknown algorithm variant {name!r} (choose from "
                         f"{', '.join(VARIANTS)})")
    VARIANTS[name](config)
    return config
