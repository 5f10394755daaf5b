"""Cross-sampling and extrapolation studies: accuracy and pass@k against the
replacement budget and against γ, for any verifier and prompt source.

    judge = Judge(tokenizer.decode, verify)                  # verify(texts, refs) -> [N]
    rows = budget_sweep(base, rl, prompts, refs, judge, criteria=("delta_logp", "js"),
                        budgets=(0.01, 0.04, 0.16), direction="forward", n=8,
                        sampling_params=sp, rng=jax.random.key(0))
    rows += gamma_sweep(base, rl, prompts, refs, judge, gammas=(0, 0.05, 0.1), where="all", ...)

Every row: {"criterion", "direction", "budget", "gamma", "threshold",
"realised_fraction", "accuracy", "pass@k"...}; `pure_rows` adds one row per
policy decoded alone (criterion "pure"), the levels the sweeps move between.

Budgets are met the way the cross-sampling study selects "the top q% of
positions": a criterion's threshold for budget q is the (1 − q) quantile of its
score over all positions the main policy generates on its own (`calibrate`), so
about q of all positions fire; there is no per-row cap (`MixRule.budget` stays 1:
with 8-token answers a per-row cap of q·8 would round small budgets to 0). Every
criterion is so compared at the same budget; since replacing tokens changes
what follows, the x-axis to plot is the realised fraction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import numpy as np

from rl.analysis.pairs import Policy
from rl.rewards.spec import CORRECT  # a verifier gives 1.0 for a correct answer
from rl.train.evaluation import pass_at_k
from sampling import SamplingParams
from sampling.lockstep import MixRule, lockstep_generate

DIRECTIONS = {"forward": "base", "reverse": "rl"}  # direction -> the policy that decodes


@dataclasses.dataclass
class Judge:
    """Turns completions into correctness: `decode(ids) -> str` and
    `verify(texts, references) -> scores [N]` (correct when >= 1)."""

    decode: Callable[[list[int]], str]
    verify: Callable[[list[str], list], np.ndarray]


def _metrics(judge: Judge, out, references, n: int, ks: Sequence[int]) -> dict:
    ro = out.rollouts
    texts = [judge.decode(ro.completion(r)) for r in range(len(ro))]
    refs = [references[int(i)] for i in ro.prompt_index]
    correct = (np.asarray(judge.verify(texts, refs)) >= CORRECT).reshape(-1, n)
    counts = correct.sum(axis=1)
    generated = max(int(ro.lengths.sum()), 1)
    metrics = {"accuracy": float(correct.mean()),
               "realised_fraction": float(out.replaced.sum()) / generated,
               "tokens": int(ro.lengths.sum())}
    for k in ks:
        metrics[f"pass@{k}"] = float(np.mean([pass_at_k(n, int(c), k) for c in counts]))
    return metrics


def _run(base: Policy, rl: Policy, prompts, rule: MixRule, n, sp, rng, page_size):
    return lockstep_generate(base.config, base.params, rl.config, rl.params, prompts, n, sp,
                             rule, rng, page_size=page_size,
                             segment_len=page_size * -(-sp.max_new_tokens // page_size))


def calibrate(scores: np.ndarray, budget: float) -> float:
    """The threshold at which a share `budget` of `scores` fire (score >= threshold):
    the (1 − budget) quantile rounded up to a score, so at most `budget` fire unless
    the cut falls inside a tie, which fires whole. inf for budget 0, -inf for 1."""
    scores = np.asarray(scores, np.float64)
    if budget <= 0 or not scores.size:
        return float("inf")
    if budget >= 1:
        return float("-inf")
    return float(np.quantile(scores, 1.0 - budget, method="higher"))


def pure_rows(base, rl, prompts, references, judge, *, n, sampling_params, rng,
              ks=(1,), page_size=16) -> list[dict]:
    """Accuracy of each policy decoding alone (budget 0, same seed as the sweeps)."""
    rows = []
    for direction, policy in DIRECTIONS.items():
        out = _run(base, rl, prompts, MixRule(main=policy, criterion="all", budget=0.0), n,
                   sampling_params, rng, page_size)
        rows.append({"criterion": "pure", "policy": policy, "direction": direction,
                     "budget": 0.0, "gamma": 0.0, "threshold": None,
                     **_metrics(judge, out, references, n, ks)})
    return rows


def budget_sweep(base: Policy, rl: Policy, prompts, references, judge: Judge, *,
                 criteria: Sequence[str], budgets: Sequence[float], direction: str, n: int,
                 sampling_params: SamplingParams, rng: jax.Array, ks=(1,), page_size=16,
                 progress: Callable[[str], None] | None = None) -> list[dict]:
    """Replacement at each budget for each criterion, thresholds calibrated per
    criterion on the main policy's own samples (see the module doc)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {sorted(DIRECTIONS)}, got {direction!r}")
    main = DIRECTIONS[direction]
    rows = []
    for criterion in criteria:
        probe = _run(base, rl, prompts, MixRule(main=main, criterion=criterion, budget=0.0,
                                                threshold=0.0), n, sampling_params, rng,
                     page_size)
        ro = probe.rollouts
        generated = np.arange(probe.score.shape[1])[None] < ro.lengths[:, None]
        scores = probe.score[generated]
        for budget in budgets:
            threshold = calibrate(scores, budget)
            rule = MixRule(main=main, criterion=criterion, threshold=threshold)
            out = _run(base, rl, prompts, rule, n, sampling_params, rng, page_size)
            row = {"criterion": criterion, "direction": direction, "budget": float(budget),
                   "gamma": 0.0, "threshold": threshold,
                   **_metrics(judge, out, references, n, ks)}
            rows.append(row)
            if progress:
                progress(f"{direction} {criterion} budget {budget:g}: replaced "
                         f"{row['realised_fraction']:.3f}, accuracy {row['accuracy']:.3f}")
    return rows


def gamma_sweep(base: Policy, rl: Policy, prompts, references, judge: Judge, *,
                gammas: Sequence[float], where: str, n: int, sampling_params: SamplingParams,
                rng: jax.Array, tau: float = 0.3, ks=(1,), page_size=16,
                progress: Callable[[str], None] | None = None) -> list[dict]:
    """Extrapolation π ∝ π_RL·(π_RL/π_base)^γ for each γ: everywhere (`where="all"`,
    decoding the extrapolated policy) or only where the base's token has
    Δlog p ≤ −tau (`where="delta_logp"`, base decoding as the authors)."""
    if where not in ("all", "delta_logp"):
        raise ValueError(f"where must be all or delta_logp, got {where!r}")
    rows = []
    for gamma in gammas:
        rule = MixRule(mode="extrapolate", main="base", criterion=where, threshold=tau,
                       gamma=float(gamma))
        out = _run(base, rl, prompts, rule, n, sampling_params, rng, page_size)
        row = {"criterion": f"extrapolate:{where}", "direction": "forward", "budget": 1.0,
               "gamma": float(gamma), "threshold": tau if where != "all" else None,
               **_metrics(judge, out, references, n, ks)}
        rows.append(row)
        if progress:
            progress(f"extrapolate ({where}) γ={gamma:g}: replaced "
                     f"{row['realised_fraction']:.3f}, accuracy {row['accuracy']:.3f}")
    return rows
