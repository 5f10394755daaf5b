"""Token-level analysis of what RL changed (docs/analysis.md).

    from rl import analysis
    stats = analysis.score_pair(base_config, base_params, rl_config, rl_params, tokens)
    base, rl = analysis.load_policy("runs/demo/sft"), analysis.load_policy("runs/demo/final")
    scored = analysis.score_rows(base, rl, prompts, completions)    # [R, W] stats + mask
    rows = analysis.budget_sweep(base, rl, prompts, refs, judge, criteria=("delta_logp", "js"),
                                 budgets=(0.05, 0.1), direction="forward", n=8,
                                 sampling_params=sp, rng=jax.random.key(0))

Modules: scoring (jitted two-model statistics, chunked over positions and
vocabulary), summary (sparsity, position, mass reallocation), pairs (policies
and packed rows), sweeps (cross-sampling and extrapolation on the lockstep
sampler), updates (consecutive checkpoints), study (what `launch.analyze`
runs), plots and report (PNG figures, self-contained HTML).
"""

from rl.analysis.pairs import Policy, Scored, load_policy, pack, score_rows
from rl.analysis.scoring import FIELDS, ScoreOptions, check_pair, score_pair
from rl.analysis.summary import summarize
from rl.analysis.sweeps import Judge, budget_sweep, calibrate, gamma_sweep, pure_rows

__all__ = [
    "FIELDS", "Judge", "Policy", "ScoreOptions", "Scored", "budget_sweep", "calibrate",
    "check_pair", "gamma_sweep", "load_policy", "pack", "pure_rows", "score_pair", "score_rows",
    "summarize",
]
