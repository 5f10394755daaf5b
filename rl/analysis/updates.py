"""What each stretch of an RL run changed: Δlog p between consecutive checkpoints.

    rows = update_stats("runs/demo", prompts, completions)

Every pair of consecutive Orbax checkpoints (steps s < s') of a training
workdir scores the same rows teacher-forced (a = step s, b = step s'), and
each row of the result summarises that update: mean and largest |Δlog p|,
the share of completion positions whose |Δlog p| or JS exceeds thresholds,
and the mean KL(π_s‖π_s').
"""

from __future__ import annotations

import numpy as np

from rl.analysis.pairs import Policy, score_rows
from rl.analysis.scoring import ScoreOptions


def checkpoint_policies(workdir: str, steps=None) -> list[Policy]:
    """The workdir's checkpoints as policies, oldest first (`steps` picks some)."""
    from rl import build, checkpoint

    directory = build.checkpoint_dir(workdir)
    if directory is None:
        raise FileNotFoundError(f"{workdir} has no Orbax checkpoints (checkpoints/)")
    stored = checkpoint.stored_steps(directory)
    chosen = stored if steps is None else [int(s) for s in steps]
    missing = sorted(set(chosen) - set(stored))
    if missing:
        raise FileNotFoundError(f"no checkpoint of step(s) {missing} in {directory} (steps: "
                                f"{', '.join(map(str, stored))})")
    if len(chosen) < 2:
        raise ValueError(f"need at least two checkpoints in {directory} to compare, found "
                         f"{len(chosen)}")
    run = build.resolve(build.config_from_checkpoint(directory, chosen[0]), None)
    policies = []
    for step in sorted(chosen):
        _, params = build.checkpoint_params(run, directory, step)
        policies.append(Policy(f"step {step}", run.model_config, params, run.tokenizer_dir, step))
    return policies


def update_stats(policies: list[Policy], prompts, completions, *,
                 options: ScoreOptions = ScoreOptions()) -> list[dict]:
    """One summary per consecutive pair of `policies` on the same rows."""
    rows = []
    for before, after in zip(policies, policies[1:]):
        scored = score_rows(before, after, prompts, completions, options=options)
        mask = scored.mask
        delta = np.abs(scored.stats["delta_logp"][mask])
        js = scored.stats["js"][mask]
        rows.append({
            "from": before.name, "to": after.name, "from_step": before.step,
            "to_step": after.step, "positions": int(delta.size),
            "mean_abs_delta": float(delta.mean()), "max_abs_delta": float(delta.max()),
            "frac_abs_delta_above_0.1": float(np.mean(delta > 0.1)),
            "frac_js_above_0.01": float(np.mean(js > 0.01)),
            "mean_kl": float(scored.stats["kl_ab"][mask].mean())})
    return rows
