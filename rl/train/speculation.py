"""`sampling.speculative`: speculative decoding in a run's flat sampler, resolved and
checked, and a step's counts (`sampling.spec_decode`)."""

from __future__ import annotations

from collections.abc import Callable

import jax

import models
from models import paths
from models.config import ModelConfig
from rl.registry import set_options
from sampling import spec_model
from sampling.spec_decode import SpecConfig

LAYERS = "layers:"  # draft_model=layers:N: the policy's first N layers and its head


def resolve(cfg) -> SpecConfig | None:
    """The run's SpecConfig (None: off); ValueError for a run it cannot serve."""
    section = cfg.sampling.speculative
    options = set_options(section, exclude=("enable", "draft_model"))
    if not section.enable:
        if options or section.draft_model is not None:
            named = sorted(options) + (["draft_model"] if section.draft_model is not None else [])
            raise ValueError(f"sampling.speculative options {named} are set but "
                             "sampling.speculative.enable is off")
        return None
    model = options.get("drafter") == "model"
    if model != (section.draft_model is not None):
        raise ValueError("sampling.speculative.drafter=model takes sampling.speculative."
                         "draft_model (layers:N or a checkpoint directory), and draft_model "
                         "takes drafter=model")
    if model and int(cfg.lora.rank or 0) >= 1:
        raise ValueError("sampling.speculative.drafter=model with lora.rank >= 1 is not "
                         "supported: use the ngram drafter")
    for on, what in ((cfg.sampling.sampler != "flat", f"sampling.sampler={cfg.sampling.sampler}"),
                     (cfg.rollout.max_turns > 0, "rollout.max_turns > 0"),
                     (cfg.rollout.mode == "async" and cfg.rollout.kv_on_update == "keep",
                      "rollout.kv_on_update=keep")):
        if on:
            raise ValueError(f"sampling.speculative with {what}: speculative decoding runs in "
                             "the flat single-turn sampler without kept caches")
    return SpecConfig(**options)


def drafter(cfg, config: ModelConfig, act) -> Callable | None:
    """`sampling.speculative.draft_model` as a function of the sampler's params ->
    (draft config, draft params), or None (no model drafter). "layers:N": the policy's own
    first N layers and head (self-speculation: it follows the policy as it trains, with no
    weights of its own); else a Hugging Face checkpoint directory (local or a bucket's),
    loaded once onto the sampler's mesh `act`. ValueError for a drafter that cannot
    draft for the policy, before any weights are read."""
    source = cfg.sampling.speculative.draft_model
    if source is None or not cfg.sampling.speculative.enable:
        return None
    if source.startswith(LAYERS):
        count = source[len(LAYERS):]
        if not count.isdigit() or not 1 <= int(count) < config.num_layers:
            raise ValueError(f"sampling.speculative.draft_model={source}: N must be an int "
                             f"in [1, {config.num_layers - 1}] (the policy has "
                             f"{config.num_layers} layers)")
        draft_config = config.replace(num_layers=int(count))
        return lambda params: (draft_config, truncate(params, int(count)))
    local = paths.cached(source)
    draft_config = models.read_config(local)
    try:
        spec_model.check(config, draft_config)
    except ValueError as e:
        raise ValueError(f"sampling.speculative.draft_model={source}: {e}") from None
    _, params = models.load_pretrained(local, draft_config.weight_dtype, mesh=act.mesh,
                                       rules=act.rules)
    return lambda _: (draft_config, params)


def truncate(params: dict, count: int) -> dict:
    """The policy's params with only its first `count` layers (layers stacked on axis 0)."""
    return dict(params, layers=jax.tree.map(lambda x: x[:count], params["layers"]))


def stats(rollouts: list) -> dict[str, float]:
    """A step's speculative work: calls, tokens per policy forward and the share of
    proposed drafts kept (0 when no call speculated)."""
    total = lambda key: sum(int(r.stats.get(key, 0)) for r in rollouts)  # noqa: E731
    forwards = total("spec/row_forwards")
    return {"spec/calls": total("spec/calls"),
            "spec/tokens_per_forward": total("spec/tokens") / forwards if forwards else 0.0,
            "spec/acceptance": total("spec/accepted") / max(total("spec/proposed"), 1)}
