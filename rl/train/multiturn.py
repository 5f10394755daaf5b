"""Multi-turn episodes in a run: the environment a config names, the sampler call, the
episode's answer, per-token turn ids, the supervised warm start's tool-use traces and the
episode metrics.

    env = environment(cfg, tokenizer)            # None when rollout.max_turns == 0
    out = generate(run, params, prompts, n, sp, rng)   # sampling.Rollouts + .episodes
    answer_tokens(out, r)                        # the tokens the verifier scores
    turn_ids(loss_mask)                          # [R, C] each policy token's turn

An episode's reward is its last turn's: the verifier reads the policy's final answer,
never a tool's reply (a reply may hold the answer the policy has yet to copy).
"""

from __future__ import annotations

import jax
import numpy as np

import sampling
from rl.envs import parsers as parsers_lib
from rl.envs.environment import Episodes, ToolEnvironment, Turn
from rl.envs.observations import ObservationFormat
from rl.envs.sandbox import Limits
from rl.envs.tools import TOOLS
from rl.algorithms import seeupo

FORMATS = ("auto", "template", "plain")


def active(cfg) -> bool:
    return int(cfg.rollout.max_turns) > 0


def turn_tokens(cfg) -> int:
    """The most tokens of one policy turn (rollout.max_turn_tokens, 0: the episode's)."""
    return int(cfg.rollout.max_turn_tokens) or int(cfg.sampling.max_new_tokens)


def check(cfg, *, tree: bool, processes: int) -> None:
    """One-line ValueErrors for multi-turn settings that cannot run, before any compute."""
    r, m, e = cfg.rollout, cfg.rl.multiturn, cfg.env
    check_multiturn(m, int(cfg.train.prompts_per_step))
    if int(r.max_turns) < 0 or int(r.max_turn_tokens) < 0:
        raise ValueError(f"rollout.max_turns and rollout.max_turn_tokens must be >= 0, got "
                         f"{r.max_turns} and {r.max_turn_tokens}")
    if not active(cfg):
        if update_of(m) != "joint" or m.fission:
            raise ValueError("rl.multiturn.update=seeupo and rl.multiturn.fission need "
                             "rollout.max_turns >= 1 (a multi-turn run)")
        return
    if turn_tokens(cfg) > int(cfg.sampling.max_new_tokens):
        raise ValueError(f"rollout.max_turn_tokens={r.max_turn_tokens} is more than the "
                         f"episode's budget sampling.max_new_tokens="
                         f"{cfg.sampling.max_new_tokens}")
    blocked = [(tree, "sampling.sampler=tree"), (r.mode != "sync", f"rollout.mode={r.mode}"),
               (bool(r.april), "rollout.april"),
               (processes > 1, f"{processes} processes")]
    for hit, what in blocked:
        if hit:
            raise ValueError(f"rollout.max_turns with {what}: multi-turn episodes run on the "
                             "flat sampler, synchronously, in one process (docs/tools.md)")
    names = [t for t in str(e.tools).split(",") if t]
    if not names:
        raise ValueError("env.tools is empty: name at least one tool "
                         f"({', '.join(TOOLS.names())})")
    for name in names:
        TOOLS.get(name)  # raises naming the registered tools
    parsers_lib.PARSERS.get(e.parser)
    if e.format not in FORMATS:
        raise ValueError(f"env.format must be one of {', '.join(FORMATS)}, got {e.format!r}")
    if int(e.max_calls) < 1 or int(e.max_output_chars) < 1:
        raise ValueError(f"env.max_calls and env.max_output_chars must be >= 1, got "
                         f"{e.max_calls} and {e.max_output_chars}")
    limits(e)


UPDATES = ("joint", "seeupo")


def update_of(m) -> str:
    """rl.multiturn.update (read by key: `update` is also a ConfigDict method)."""
    return m["update"]


def check_multiturn(m, prompts_per_step: int) -> None:
    """The `rl.multiturn` section's values."""
    if update_of(m) not in UPDATES:
        raise ValueError(f"rl.multiturn.update must be one of {', '.join(UPDATES)}, got "
                         f"{update_of(m)!r}")
    seeupo.turn_order(1, m.order)
    if not (0 < m.factor_low < 1 and m.factor_high > 0):
        raise ValueError(f"rl.multiturn.factor_low must be in (0, 1) and factor_high > 0, got "
                         f"{m.factor_low} and {m.factor_high}")
    if m.fission and (m.fission_capacity < prompts_per_step or m.fission_every < 1):
        raise ValueError(f"rl.multiturn.fission_capacity must be >= train.prompts_per_step "
                         f"({prompts_per_step}) and fission_every >= 1, got "
                         f"{m.fission_capacity} and {m.fission_every}")


def limits(e) -> Limits:
    s = e.sandbox
    return Limits(wall_s=float(s.wall_s), cpu_s=int(s.cpu_s), memory_mb=int(s.memory_mb),
                  output_bytes=int(s.output_bytes))


def environment(cfg, tokenizer) -> ToolEnvironment | None:
    """The `env` section's tools behind its parser (None for a single-turn run)."""
    if not active(cfg):
        return None
    e = cfg.env
    tools = []
    for name in [t for t in str(e.tools).split(",") if t]:
        factory = TOOLS.get(name)
        tools.append(factory(limits=limits(e)) if name == "python" else factory())
    template = e.format == "template" or (
        e.format == "auto" and cfg.data.chat_template and tokenizer.has_chat_template)
    fmt = ObservationFormat.from_template(tokenizer) if template else ObservationFormat.plain()
    return ToolEnvironment(tools, parser=e.parser, fmt=fmt, tokenizer=tokenizer,
                           max_calls=int(e.max_calls), max_output_chars=int(e.max_output_chars))


def generate(run, params, prompts, n: int, sp: sampling.SamplingParams, rng
             ) -> sampling.Rollouts:
    """`n` episodes of each prompt with the run's environment; `.episodes` holds each
    row's `rl.envs.environment.Record`. They are sampled on the mesh's first device (a
    copy of sharded params is gathered there for the call)."""
    cfg = run.cfg
    first = run.act.mesh.devices.flat[0]
    if any(len(leaf.devices()) > 1 for leaf in jax.tree.leaves(params)):
        params = jax.device_put(params, first)  # the episodes run on one device
    rng = jax.device_put(rng, first)
    episodes = Episodes(run.env, run.tokenizer, len(prompts) * n)
    out = sampling.generate_turns(run.model_config, params, prompts, n, sp, rng, episodes,
                                  max_turns=int(cfg.rollout.max_turns),
                                  max_turn_tokens=turn_tokens(cfg),
                                  page_size=cfg.sampling.page_size,
                                  segment_len=cfg.sampling.segment_len)
    out.episodes = episodes.records
    return out


def answer_start(loss_mask: np.ndarray, length: int) -> int:
    """Where a row's last policy turn starts: after its last environment token."""
    observed = np.flatnonzero(~np.asarray(loss_mask[:length], bool))
    return int(observed[-1]) + 1 if observed.size else 0


def answer_tokens(rollouts: sampling.Rollouts, r: int) -> list[int]:
    """The tokens the verifier scores: the whole completion, or a multi-turn row's last
    turn."""
    tokens = rollouts.completion(r)
    if rollouts.loss_mask is None:
        return tokens
    return tokens[answer_start(rollouts.loss_mask[r], len(tokens)):]


def turn_ids(mask: np.ndarray) -> np.ndarray:
    """[R, C] int32: each policy token's turn (0-based; -1 on the environment's tokens and
    padding), from a loss mask [R, C] whose runs of True are the turns."""
    mask = np.asarray(mask, bool)
    starts = mask & ~np.pad(mask, ((0, 0), (1, 0)))[:, :-1]
    return np.where(mask, np.cumsum(starts, axis=1) - 1, -1).astype(np.int32)


def trace(env: ToolEnvironment, tokenizer, eos: int, call: str, answer: str
          ) -> tuple[list[int], list[bool]]:
    """A tool-use episode for the supervised warm start: the turn that asks the calculator
    for `call` (in the environment's parser's format), the environment's real reply (not trained), the turn that gives `answer`.
    Returns (tokens, loss mask)."""
    render = parsers_lib.RENDERERS[env.parser_name]
    first = tokenizer.encode(render(parsers_lib.ToolCall("calculator", {"expression": call})),
                             add_special_tokens=False) + [eos]
    [reply] = env.respond([Turn(tuple(first), tokenizer.decode(first), True)])
    if reply.done or reply.tool_errors or reply.parse_failures:
        raise ValueError(f"the warm start's calculator call {call!r} failed: {reply.text!r}")
    last = tokenizer.encode(answer, add_special_tokens=False) + [eos]
    tokens = first + list(reply.observation) + last
    mask = [True] * len(first) + [False] * len(reply.observation) + [True] * len(last)
    return tokens, mask


def episode_stats(batches: list[sampling.Rollouts]) -> dict[str, float]:
    """Means per episode over a step's multi-turn rollouts: turns, tool calls, parse
    failures, tool errors, episodes with a failed call, policy vs environment tokens,
    episodes stopped by the turn limit."""
    records = [rec for out in batches for rec in (out.episodes or [])]
    if not records:
        return {}
    mask = [out.loss_mask[r, :out.lengths[r]] for out in batches for r in range(len(out))]
    count = len(records)
    mean = lambda values: float(np.sum(values)) / count  # noqa: E731
    return {
        "episode/turns": mean([t for out in batches for t in out.turns]),
        "episode/tool_calls": mean([rec.tool_calls for rec in records]),
        "episode/parse_failures": mean([rec.parse_failures for rec in records]),
        "episode/tool_errors": mean([rec.tool_errors for rec in records]),
        "episode/failed_frac": mean([rec.failure is not None for rec in records]),
        "episode/policy_tokens": mean([m.sum() for m in mask]),
        "episode/observed_tokens": mean([(~m).sum() for m in mask]),
        "episode/turn_limit_frac": sum(int(out.stats.get("turn_limit_rows", 0))
                                       for out in batches) / count}
