"""What each stretch of an RL run changed: Δlog p between consecutive checkpoints.

    rows = checkpoint_updates("runs/demo", prompts, completions)

Every pair of consecutive Orbax checkpoints (steps s < s') of a training
workdir scores the same rows teacher-forced (a = step s, b = step s'), and
each row of the result summarises that update: mean and largest |Δlog p|,
the share of completion positions whose |Δlog p| or JS exceeds thresholds,
and the mean KL(π_s‖π_s'). Two checkpoints are in memory at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rl.analysis.pairs import Policy, _fp32, _short, score_rows
from rl.analysis.scoring import ScoreOptions
from rl.checkpoint import persistent
from rl.train import build


def checkpoint_steps(workdir: str) -> list[int]:
    """The steps of a workdir's Orbax checkpoints, ascending ([] when it has none)."""

    directory = build.checkpoint_dir(workdir)
    return persistent.stored_steps(directory) if directory else []


def _loader(workdir: str) -> Callable[[int], Policy]:

    directory = build.checkpoint_dir(workdir)
    run = build.resolve(build.config_from_checkpoint(directory), None)

    def load(step: int) -> Policy:
        _, params = build.checkpoint_params(run, directory, step)
        return Policy(f"{_short(workdir)}@{step}", _fp32(run.model_config), params,
                      run.tokenizer_dir, step)

    return load


def summarize_update(before: Policy, after: Policy, prompts, completions, *,
                     options: ScoreOptions = ScoreOptions()) -> dict:
    """One update's statistics on the same rows (see the module doc)."""
    scored = score_rows(before, after, prompts, completions, options=options)
    mask = scored.mask
    delta = np.abs(scored.stats["delta_logp"][mask])
    js = scored.stats["js"][mask]
    return {"from": before.name, "to": after.name, "from_step": before.step,
            "to_step": after.step, "positions": int(delta.size),
            "mean_abs_delta": float(delta.mean()), "max_abs_delta": float(delta.max()),
            "frac_abs_delta_above_0.1": float(np.mean(delta > 0.1)),
            "frac_js_above_0.01": float(np.mean(js > 0.01)),
            "mean_kl": float(scored.stats["kl_ab"][mask].mean())}


def checkpoint_updates(workdir: str, prompts, completions, *,
                       options: ScoreOptions = ScoreOptions(),
                       progress: Callable[[str], None] | None = None) -> list[dict]:
    """`summarize_update` for every consecutive pair of the workdir's checkpoints."""
    steps = checkpoint_steps(workdir)
    if len(steps) < 2:
        raise ValueError(f"need at least two checkpoints in {workdir} to compare, found "
                         f"{len(steps)}")
    load = _loader(workdir)
    rows, before = [], load(steps[0])
    for step in steps[1:]:
        after = load(step)
        rows.append(summarize_update(before, after, prompts, completions, options=options))
        if progress:
            progress(f"steps {before.step} -> {step}: mean |Δlog p| "
                     f"{rows[-1]['mean_abs_delta']:.4f}")
        before = after
    return rows
