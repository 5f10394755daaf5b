"""`rl.multiturn.update=seeupo`: a multi-turn batch updated turn by turn (SeeUPO's loop).

    state, metrics, extra = seeupo_update(learner, state, sequences, inputs, grad_mask,
                                          adv, old_logp, turn_ids, order="reverse")

The batch's episodes are whole token sequences (never re-rendered), so "turn k's sample"
is the same sequence with the loss on turn k's tokens only: its context is exactly the
tokens before it. For each turn k in `order` (reverse: the last turn first):
  1. π_old on turn k's tokens: the step's proximal log-probs for the first turn updated,
     then recomputed with the policy the later turns have already moved;
  2. one `learner.train_step` on turn k's tokens with advantage A·F (F: each episode's
     factor, 1 at first);
  3. the turn's sequence log-ratio under the updated policy moves F
     (`rl.algorithms.seeupo.update_factor`, clipped to [1 - low, 1 + high]).
Turns no episode of the batch reached are skipped (the authors' code steps its optimizer
on them too, with zero advantage; docs/algorithms.md, "SeeUPO").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from models.multihost import to_host
from rl.algorithms import seeupo
from rl.train import multiturn


def seeupo_update(learner, state, sequences: dict, inputs: Callable[[np.ndarray, np.ndarray,
                                                                          np.ndarray], dict],
                  grad_mask: np.ndarray, adv: np.ndarray, old_logp: np.ndarray,
                  turn_ids: np.ndarray, *, order: str = "reverse", low: float = 0.2,
                  high: float = 0.2):
    """Runs the turn-by-turn update. `sequences`: the placed learner inputs;
    `inputs(mask, adv, old_logp)` -> the placed per-token update inputs; `grad_mask`,
    `adv`, `old_logp` [N, C] the step's; `turn_ids` [N, C] each token's policy turn
    (`rl.train.multiturn.turn_ids`). Returns (state, the last turn's learner metrics,
    SeeUPO's metrics)."""
    turns = int(turn_ids.max(initial=-1)) + 1
    factor = np.ones(grad_mask.shape[0], np.float32)
    metrics, steps = {}, 0
    score = lambda state: to_host(learner.score(learner.policy(state.params),  # noqa: E731
                                                sequences)[0])
    for k in seeupo.turn_order(max(turns, 1), order):
        mask_k = grad_mask & (turn_ids == k)
        if not mask_k.any():
            continue
        old_k = old_logp if steps == 0 else score(state)
        adv_k = np.where(mask_k, adv * factor[:, None], 0.0).astype(np.float32)
        state, metrics = learner.train_step(state, sequences | inputs(mask_k, adv_k, old_k))
        new_k = score(state)
        factor = np.asarray(seeupo.update_factor(
            factor, seeupo.sequence_log_ratio(new_k, old_k, mask_k), mask_k.any(axis=1),
            low=low, high=high))
        steps += 1
    if not steps:  # no policy token in the batch: one ordinary (zero-advantage) step
        state, metrics = learner.train_step(state, sequences | inputs(grad_mask, adv, old_logp))
    rows = grad_mask.any(axis=1)
    extra = {"seeupo/turn_updates": steps,
             "seeupo/factor_mean": float(factor[rows].mean()) if rows.any() else 1.0,
             "seeupo/factor_min": float(factor[rows].min()) if rows.any() else 1.0,
             "seeupo/factor_max": float(factor[rows].max()) if rows.any() else 1.0}
    return state, metrics, extra


def for_trainer(trainer, seqs, sequences, grad_mask, adv, old_logp, ref_logp):
    """`seeupo_update` with a `rl.train.trainer.Trainer`'s learner, state and inputs."""
    m = trainer.cfg.rl.multiturn
    learner = trainer.learner
    return seeupo_update(
        learner, trainer.state, sequences,
        lambda mask, a, old: learner.place_arrays(
            trainer.update_inputs(seqs, mask, a, old, ref_logp)),
        grad_mask, adv, old_logp, multiturn.turn_ids(seqs.mask), order=m.order,
        low=m.factor_low, high=m.factor_high)
