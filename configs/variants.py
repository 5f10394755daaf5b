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
                dynamic sampling on accuracy (up to 10 rounds), soft overlong
                penalty over the last fifth of the length limit (the authors'
                4,096 of 20,480 tokens), no KL; 16 minibatches per rollout batch
                (the authors' 512 prompts / 32 per minibatch)
  gspo          sequence-level ratio clipped at 3e-4 / 4e-4, no KL; 4
                minibatches per rollout batch (GSPO)
  rloo          leave-one-out baseline, k1 KL folded into the reward; one
                on-policy update (RLOO is REINFORCE with a baseline)
  reinforce_pp  token-level returns whitened over the batch, k1 KL in the
                reward; 8 minibatches per rollout batch (OpenRLHF's example:
                1,024 rollouts, 128 per optimizer step)
  nsr           DAPO with near-boundary stochastic rescue (the nsr loss)
  fipo          DAPO with FIPO's future-KL weights (high-only [1, 1.2], δ = 10)
  logp_reweight DAPO with Δlog p low-probability reweighting 1 + c - c·p, c = 0.2
                (RLVR-Directions run_7B.sh)
  delta_logp_mask  DAPO keeping the tokens at or above the 0.2-quantile of
                log π_old - log π_ref from step 20 (the authors' logp mask)
  divergence_weighted  GRPO advantages times 1 + α·JS_t/mean(JS), JS the
                full-vocabulary divergence of π_old from the reference
  mc_grpo       median baseline over G + 1 samples, (R - median)/(MAD + 1e-3),
                the pivot out of the gradient (MC-GRPO's authors)
  treepo        the tree sampler (segments of max_new_tokens / 4, depth 4, 16
                leaves, first branching 2..8, divergence 2) with the tree
                advantage and DAPO's clip 0.2 / 0.28, dual clip 10
  dars          Dr.GRPO advantages, no KL, extra rollouts for hard prompts
                (hardness-weighted, N_max = 64)
  dars_b        DARS with breadth: 4× the prompts per step in one full-batch
                update, 2 epochs (the authors' 3,072 prompts per step)
  april         GRPO with active partial rollouts: 2× the groups in flight, the
                step trains on the first to finish, partial samples carry over
                (APRIL; slime's example over-samples 2×)
  bots          GRPO over prompts chosen by BOTS (Thompson draws from Beta
                pass-rate posteriors; a procedural task's pool capped at 4,096)
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
    c.rl.overlong.buffer, c.rl.overlong.factor = max(1, c.sampling.max_new_tokens // 5), 1.0
    c.train.dynamic_sampling = True
    c.train.dynamic_max_rounds = 10
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


def _nsr(c):
    _dapo(c)
    c.rl.loss.name = "nsr"


def _fipo(c):
    _dapo(c)
    c.rl.reweight.name = "fipo"


def _logp_reweight(c):
    _dapo(c)
    c.rl.reweight.name = "logp_reweight"
    c.rl.reweight.c, c.rl.reweight.form = 0.2, "linear"


def _delta_logp_mask(c):
    _dapo(c)
    c.rl.reweight.name = "delta_logp_mask"
    c.rl.reweight.quantile, c.rl.reweight.start_step = 0.2, 20


def _divergence_weighted(c):
    _grpo(c)
    c.rl.kl.coef = 0.0
    c.rl.reweight.name = "divergence_weighted"
    c.rl.reweight.divergence, c.rl.reweight.alpha = "js", 1.0


def _mc_grpo(c):
    _grpo(c)
    c.rl.advantage.name = "mc_grpo"
    c.rl.advantage.scale = "mad"


def _treepo(c):
    _dapo(c)
    c.train.dynamic_sampling = False
    c.rl.overlong.buffer = 0
    c.rl.advantage.name = "tree"
    c.sampling.sampler = "tree"
    depth, page = 4, c.sampling.page_size
    segment = max(1, c.sampling.max_new_tokens // depth)
    if segment < page:  # short answers: pages as small as a segment
        c.sampling.page_size = segment
    else:
        segment = segment // page * page
    c.sampling.tree.max_depth = depth
    c.sampling.tree.segment_len = segment
    c.sampling.tree.leaves_per_prompt = 16
    c.sampling.tree.first_branching = "2,8"
    c.sampling.tree.divergence = 2


def _dars(c):
    _dr_grpo(c)
    c.data.selector.name = "dars"
    c.data.selector.schedule, c.data.selector.n_max = "hw", 64


def _dars_b(c):
    _dars(c)
    c.train.prompts_per_step *= 4
    c.train.epochs, c.train.minibatches = 2, 1


def _bots(c):
    _grpo(c)
    c.data.selector.name = "bots"
    if c.data.source == "task":
        c.data.train_size = min(c.data.train_size, 4096)


def _april(c):
    _grpo(c)
    c.rollout.april, c.rollout.over_provision = True, 2.0


VARIANTS = {"grpo": _grpo, "dr_grpo": _dr_grpo, "dapo": _dapo, "gspo": _gspo,
            "rloo": _rloo, "reinforce_pp": _reinforce_pp, "nsr": _nsr, "fipo": _fipo,
            "logp_reweight": _logp_reweight, "delta_logp_mask": _delta_logp_mask,
            "divergence_weighted": _divergence_weighted, "mc_grpo": _mc_grpo,
            "treepo": _treepo, "dars": _dars, "dars_b": _dars_b, "bots": _bots,
            "april": _april}


def apply(config: ml_collections.ConfigDict, name: str) -> ml_collections.ConfigDict:
    """Sets variant `name` on an (unlocked or locked) config in place."""
    if name not in VARIANTS:
        raise ValueError(f"unknown algorithm variant {name!r} (choose from "
                         f"{', '.join(VARIANTS)})")
    VARIANTS[name](config)
    return config
