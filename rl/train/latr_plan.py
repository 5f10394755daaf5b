"""`sampling.sampler=latr`: the `sampling.latr` section resolved for a run, and the tree
width of each training step (the authors' mix-ratio schedule).

Of a prompt's `sampling.n` samples, round(n · ratio) grow as a LATR tree at a step and
the rest are drawn plainly (`sampling.latr_generate`); ratio 0 is the flat sampler. The
schedule "0:1,10:0.75,20:0.5,80:0.25,200:0" (the authors' scripts, the default) holds
each ratio from its step until the next one's. Calls for one sample per prompt (DARS's
extra rollouts, not part of the authors' method) sample flat.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rl.registry import set_options
from sampling import LatrConfig
from sampling.latr import math_symbol_tokens

DEFAULT_SCHEDULE = "0:1,10:0.75,20:0.5,80:0.25,200:0"


@dataclasses.dataclass(frozen=True)
class LatrPlan:
    config: LatrConfig               # its width: sampling.n (replaced per step)
    schedule: tuple[tuple[int, float], ...]
    exempt: np.ndarray | None        # [V] keep_math_symbols' tokens (None: no tokenizer)

    def width(self, step: int, n: int) -> int:
        """Tree rows per prompt at training step `step` (0: sample flat)."""
        ratio = self.schedule[0][1]
        for start, value in self.schedule:
            if start <= step:
                ratio = value
        return round(n * ratio)

    def at(self, step: int, n: int) -> LatrConfig | None:
        width = self.width(step, n)
        return dataclasses.replace(self.config, width=width) if width else None


def check_rollout(cfg) -> None:
    """LATR samples whole synchronous single-turn groups on one batch shard."""
    for on, what in ((cfg.rollout.mode != "sync", f"rollout.mode={cfg.rollout.mode}"),
                     (cfg.rollout.april, "rollout.april"),
                     (cfg.rollout.max_turns > 0, "rollout.max_turns > 0")):
        if on:
            raise ValueError(f"sampling.sampler=latr with {what}: LATR grows whole groups "
                             "in one synchronous single-turn call; use one of them")


def stats(rollouts: list) -> dict[str, float]:
    """A step's LATR work: branches born, pruned and suppressed, rows filled, the tokens
    decoded against those returned, the mean step the tree phase ended (-1: never)."""
    total = lambda key: sum(int(r.stats.get(key, 0)) for r in rollouts)  # noqa: E731
    out = {f"latr/{k}": total(f"latr/{k}") for k in ("born", "pruned", "suppressed",
                                                      "filled")}
    returned = sum(int(r.lengths.sum()) for r in rollouts)
    out["latr/shared_token_frac"] = 1.0 - total("latr/decoded_tokens") / max(returned, 1)
    ends = [r.stats["latr/end_step"] for r in rollouts if "latr/end_step" in r.stats]
    out["latr/end_step"] = float(np.mean(ends)) if ends else -1.0
    return out


def parse_schedule(text: str) -> tuple[tuple[int, float], ...]:
    """"step:ratio,..." -> ((step, ratio), ...), steps increasing from 0, ratios in [0, 1]."""
    try:
        pairs = [part.split(":") for part in str(text).split(",")]
        schedule = tuple((int(step), float(ratio)) for step, ratio in pairs)
    except ValueError:
        raise ValueError(f"sampling.latr.mix_schedule must be 'step:ratio,...', got "
                         f"{text!r}") from None
    steps = [step for step, _ in schedule]
    if steps[0] != 0 or steps != sorted(set(steps)):
        raise ValueError(f"sampling.latr.mix_schedule steps must increase from 0, got {text!r}")
    if any(not 0.0 <= ratio <= 1.0 for _, ratio in schedule):
        raise ValueError(f"sampling.latr.mix_schedule ratios must be in [0, 1], got {text!r}")
    return schedule


def resolve(cfg, tokenizer, vocab_size: int) -> LatrPlan:
    """The `sampling.latr` section (None = the default) as a plan; ValueError names the
    bad option or the feature LATR does not run with. `tokenizer` decodes the
    math-symbol tokens (None: none exempt)."""
    s = cfg.sampling
    check_rollout(cfg)
    opts = set_options(s.latr, exclude=())
    schedule = parse_schedule(opts.pop("mix_schedule", DEFAULT_SCHEDULE))
    if "lookahead" in opts:
        try:
            opts["lookahead"] = tuple(int(r) for r in str(opts["lookahead"]).split(","))
        except ValueError:
            raise ValueError(f"sampling.latr.lookahead must be comma-separated ints, got "
                             f"{opts['lookahead']!r}") from None
    try:
        config = LatrConfig(width=int(s.n), **opts)
    except (TypeError, ValueError) as e:
        raise ValueError(f"sampling.latr: {e}") from None
    exempt = None
    if config.keep_math_symbols and tokenizer is not None:
        exempt = np.zeros(vocab_size, bool)
        known = min(vocab_size, tokenizer.vocab_size)  # ids past the tokenizer's: none
        exempt[:known] = math_symbol_tokens(tokenizer.decode, known)
    return LatrPlan(config, schedule, exempt)
