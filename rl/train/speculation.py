"""`sampling.speculative`: speculative decoding in a run's flat sampler, resolved and
checked, and a step's counts (`sampling.spec_decode`)."""

from __future__ import annotations

from rl.registry import set_options
from sampling.spec_decode import SpecConfig


def resolve(cfg) -> SpecConfig | None:
    """The run's SpecConfig (None: off); ValueError for a run it cannot serve."""
    section = cfg.sampling.speculative
    options = set_options(section, exclude=("enable",))
    if not section.enable:
        if options:
            raise ValueError(f"sampling.speculative options {sorted(options)} are set but "
                             "sampling.speculative.enable is off")
        return None
    for on, what in ((cfg.sampling.sampler != "flat", f"sampling.sampler={cfg.sampling.sampler}"),
                     (cfg.rollout.max_turns > 0, "rollout.max_turns > 0"),
                     (cfg.rollout.mode == "async" and cfg.rollout.kv_on_update == "keep",
                      "rollout.kv_on_update=keep")):
        if on:
            raise ValueError(f"sampling.speculative with {what}: speculative decoding runs in "
                             "the flat single-turn sampler without kept caches")
    return SpecConfig(**options)


def stats(rollouts: list) -> dict[str, float]:
    """A step's speculative work: calls, tokens per policy forward and the share of
    proposed drafts kept (0 when no call speculated)."""
    total = lambda key: sum(int(r.stats.get(key, 0)) for r in rollouts)  # noqa: E731
    forwards = total("spec/row_forwards")
    return {"spec/calls": total("spec/calls"),
            "spec/tokens_per_forward": total("spec/tokens") / forwards if forwards else 0.0,
            "spec/acceptance": total("spec/accepted") / max(total("spec/proposed"), 1)}
