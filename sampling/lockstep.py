"""Lockstep decoding of two policies, a base and an RL model, mixed per token.

    result = sampling.lockstep_generate(
        base_config, base_params, rl_config, rl_params, prompts, n=4,
        sampling_params=SamplingParams(temperature=1.0, max_new_tokens=256),
        rule=MixRule(criterion="delta_logp", threshold=0.3), rng=jax.random.key(0))

This follows the lockstep decoding of the "RLVR directions" authors
(extrapolate.py): the main policy M (`rule.main`, the base by default)
decodes, the other policy O reads the same tokens, and a criterion on each
step decides whether M's token is replaced by a draw from a mix of the two.
Per decode step and row, with x_M, x_O the models' raw fp32 logits:

1. M's candidate y = processors.sample(x_M, key), key = fold_in(fold_in(rng,
   call), i) for segment call `call`, step i: the flat sampler's key, so with
   nothing firing the tokens are those of `sampling.generate(main_config,
   main_params, prompts, n, sp, rng)` (same page_size and segment_len);
2. a score at temperature 1: delta_logp = log π_M(y) − log π_O(y) (with main
   = base this is −Δlog p, Δlog p = log π_RL − log π_base: it fires where
   Δlog p ≤ −threshold, as the authors'); js = JS(π_M, π_O); entropy =
   H(π_M); kl = KL(π_M‖π_O); reverse_kl = KL(π_O‖π_M); random = U(0, 1)
   from fold_in(key, 2); all = +inf;
3. the rule fires where score >= threshold and the row has replaced fewer
   than floor(budget · max_new_tokens) tokens so far (counted across segments);
4. then the token is drawn instead from x_O (mode "replace") or from
   (1 + γ)·x_RL − γ·x_base (mode "extrapolate"; γ = 0 gives x_RL exactly),
   through the same SamplingParams processors as the main draw;
5. the replacement draw's key. When the criterion does not depend on the
   candidate (js, entropy, kl, reverse_kl, random, all) it is the main
   draw's key: a rule that always fires (budget 1) reproduces the other
   model's pure samples token for token, and extrapolation at γ = 0 π_RL's.
   For delta_logp it is an independent key, fold_in(key, 1): the firing event
   depends on the candidate, and the replacement is a fresh draw independent
   of it (the authors resample).

The emitted token is fed to both models. Each keeps its own KV cache, both
under the page tables of one PagePool ("paged side by side": the prompt
layout is computed once and prefilled into both caches); the decode loop
(`engine.decode_loop`) and host-side segment loop (`flat.run_groups`) are the
flat sampler's. A row stops on a stop token of either: both configs' eos ids
and `stop_token_ids`. The two models may differ in architecture but must
share the vocabulary.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from models.config import ModelConfig
from sampling import engine, flat, processors
from sampling.params import SamplingParams, _is_real
from sampling.rollouts import Rollouts

MODES = ("replace", "extrapolate")
MAINS = ("base", "rl")
CRITERIA = ("delta_logp", "js", "entropy", "kl", "reverse_kl", "random", "all")
COLUMNS = {"replaced": jnp.bool_, "score": jnp.float32, "logp_base": jnp.float32,
           "logp_rl": jnp.float32}


@dataclasses.dataclass(frozen=True)
class MixRule:
    """When and how a lockstep step replaces the main policy's token (hashable:
    static under jit; see the module docstring).

    Attributes:
      mode: "replace" (draw from the other policy) or "extrapolate" (from
        (1 + gamma)·x_RL − gamma·x_base on raw logits).
      main: the policy that decodes, "base" or "rl".
      criterion: one of CRITERIA, computed at temperature 1.
      threshold: the rule fires where score >= threshold (±inf allowed).
      budget: at most floor(budget · max_new_tokens) tokens per row fire, 0 <= budget <= 1.
      gamma: the extrapolation strength (finite).
    """

    mode: str = "replace"
    main: str = "base"
    criterion: str = "delta_logp"
    threshold: float = 0.3
    budget: float = 1.0
    gamma: float = 0.0

    def __post_init__(self):
        for name, allowed in (("mode", MODES), ("main", MAINS), ("criterion", CRITERIA)):
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        needs = {"threshold": ("a number (inf: never fires, -inf: always)",
                               lambda v: not math.isnan(v)),
                 "budget": ("a number in [0, 1]", lambda v: 0.0 <= v <= 1.0),
                 "gamma": ("a finite number", math.isfinite)}
        for name, (what, ok) in needs.items():
            value = getattr(self, name)
            if not _is_real(value) or not ok(value):
                raise ValueError(f"{name} must be {what}, got {value!r}")
            object.__setattr__(self, name, float(value))  # equal rules hash equally

    def cap(self, max_new_tokens: int) -> int:
        """The most tokens a row may replace."""
        return int(math.floor(self.budget * max_new_tokens + 1e-9))


@dataclasses.dataclass
class Lockstep:
    """What `lockstep_generate` returns; the arrays are host [R, max_new_tokens]
    aligned with `rollouts.tokens` (0 / False past each row's length).

    rollouts.logprobs is the emitted token's log-prob under the distribution it
    was drawn from (after processors), rollouts.raw_logprobs under the main
    policy at temperature 1.
    """

    rollouts: Rollouts
    replaced: np.ndarray   # bool: the rule fired, the token is the replacement draw
    score: np.ndarray      # fp32 the criterion's value at each step
    logp_base: np.ndarray  # fp32 raw (temperature 1) log-prob of the token under the base
    logp_rl: np.ndarray    # fp32 ... under the RL model
    stats: dict            # rollouts.stats plus replaced_tokens, replaced_fraction


def _at(logp: jax.Array, token: jax.Array) -> jax.Array:
    return jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]


def _kl(lp: jax.Array, lq: jax.Array) -> jax.Array:
    """KL(p‖q) per row from fp32 log-probs [S, V]."""
    return jnp.sum(jnp.exp(lp) * (lp - lq), axis=-1)


def _score(criterion: str, lm: jax.Array, lo: jax.Array, y: jax.Array,
           key: jax.Array) -> jax.Array:
    """The criterion [S] from the main / other log-probs lm, lo [S, V] and the
    candidate y [S]. Divergences and the entropy are clipped at 0 (their
    rounding can go below)."""
    if criterion == "delta_logp":
        return _at(lm, y) - _at(lo, y)
    if criterion == "random":
        return jax.random.uniform(jax.random.fold_in(key, 2), y.shape, jnp.float32)
    if criterion == "all":
        return jnp.full(y.shape, jnp.inf, jnp.float32)
    if criterion == "js":
        mix = jnp.logaddexp(lm, lo) - jnp.log(2.0)
        value = 0.5 * (_kl(lm, mix) + _kl(lo, mix))
    elif criterion == "entropy":
        value = -jnp.sum(jnp.exp(lm) * lm, axis=-1)
    else:
        value = _kl(lm, lo) if criterion == "kl" else _kl(lo, lm)
    return jnp.maximum(value, 0.0)


def _pick(rule: MixRule, sp: SamplingParams, knobs: jax.Array, logits: tuple, key: jax.Array,
          used: jax.Array, active: jax.Array, ids: jax.Array | None):
    """One lockstep step's token (the `engine.decode_loop` pick): steps 1-5.
    `knobs` [3] fp32 = (threshold, cap, gamma): traced, so a sweep over them
    compiles once per (mode, main, criterion)."""
    threshold, cap, gamma = knobs[0], knobs[1], knobs[2]
    x_base, x_rl = logits
    lp_base = jax.nn.log_softmax(x_base, axis=-1)
    lp_rl = jax.nn.log_softmax(x_rl, axis=-1)
    on_base = rule.main == "base"
    x_main, x_other = (x_base, x_rl) if on_base else (x_rl, x_base)
    token, logp, _ = processors.sample(x_main, key, sp, ids)
    score = _score(rule.criterion, *((lp_base, lp_rl) if on_base else (lp_rl, lp_base)),
                   token, key)
    # threshold = +inf never fires, even for `all` (whose score is +inf).
    fires = (score >= threshold) & (threshold < jnp.inf) & (used < cap)
    if rule.mode == "replace":
        x_alt = x_other
    else:  # at gamma = 0 exactly x_rl: (1 + 0)·x == x and x + (-0·y) == x for finite y
        x_alt = (1.0 + gamma) * x_rl - gamma * x_base
    alt_key = jax.random.fold_in(key, 1) if rule.criterion == "delta_logp" else key
    alt_token, alt_logp, _ = processors.sample(x_alt, alt_key, sp, ids)
    token = jnp.where(fires, alt_token, token)
    logp = jnp.where(fires, alt_logp, logp)
    values = {"replaced": fires, "score": score, "logp_base": _at(lp_base, token),
              "logp_rl": _at(lp_rl, token)}
    raw = values["logp_base" if on_base else "logp_rl"]
    return token, logp, raw, values, used + (fires & active).astype(used.dtype)


def _lockstep_decode(base_config: ModelConfig, rl_config: ModelConfig, params: tuple,
                     caches: tuple, state: engine.RowState, used: jax.Array, rng: jax.Array,
                     call: jax.Array, limit: jax.Array, sampling: SamplingParams, rule: MixRule,
                     knobs: jax.Array, steps: int, stop_ids: tuple[int, ...]):
    """`engine._decode` for the pair: `state.hidden` and `caches` are (base,
    rl) tuples, `used` [S] int32 the replacements so far per row; `rule` gives
    the static mode/main/criterion and `knobs` the traced (threshold, cap,
    gamma). Returns (DecodeOutput with `extra` = COLUMNS, hidden states,
    caches, used)."""
    engine.TRACE_COUNTS["lockstep_decode"] += 1
    return engine.decode_loop(
        ((base_config, params[0]), (rl_config, params[1])), caches, state, rng, call, limit,
        steps, stop_ids, lambda *args: _pick(rule, sampling, knobs, *args), used, COLUMNS)


_lockstep_program = engine.jit_decode(_lockstep_decode, static_argnums=(0, 1, 9, 10, 12, 13),
                                      donate_argnums=(3,))


def lockstep_generate(base_config: ModelConfig, base_params: dict, rl_config: ModelConfig,
                      rl_params: dict, prompts, n: int, sampling_params: SamplingParams,
                      rule: MixRule, rng: jax.Array, *,
                      page_size: int = flat.DEFAULT_PAGE_SIZE,
                      segment_len: int = flat.DEFAULT_SEGMENT_LEN) -> Lockstep:
    """`n` completions of each prompt decoded by both policies in lockstep,
    mixed per `rule` (see the module docstring). Rows are prompt-major, as
    `sampling.generate`'s; ValueError if the vocab sizes differ."""
    if base_config.vocab_size != rl_config.vocab_size:
        raise ValueError(f"base and rl vocab sizes differ: {base_config.vocab_size} != "
                         f"{rl_config.vocab_size}")
    if not isinstance(rule, MixRule):
        raise TypeError(f"rule must be a MixRule, got {type(rule).__name__}")
    sp = sampling_params
    stop_ids = tuple(sorted(set(engine.stop_token_ids(base_config, sp))
                            | set(rl_config.eos_token_ids)))
    pair = ((base_config, base_params), (rl_config, rl_params))

    def prefill(num_pages, layout, rows):
        filled = [engine.prefill_layout(c, p, num_pages, layout, rows) for c, p in pair]
        hidden = tuple(h for h, _ in filled)
        return hidden, (tuple(cache for _, cache in filled), np.zeros(len(rows), np.int32))

    # Only mode, main and criterion are compiled in: a sweep over thresholds,
    # budgets or gammas reuses one program.
    static_rule = dataclasses.replace(rule, threshold=0.0, budget=1.0, gamma=0.0)
    knobs = np.array([rule.threshold, rule.cap(sp.max_new_tokens), rule.gamma], np.float32)

    def decode(carry, state, seg, limit, steps):
        caches, used = carry
        out, hidden, caches, used = _lockstep_program(
            base_config, rl_config, (base_params, rl_params), caches, state, used, rng,
            np.int32(seg), limit, sp, static_rule, knobs, steps, stop_ids)
        return out, hidden, (caches, used)

    rollouts, extra = flat.run_groups((base_config, rl_config), prompts, n, sp, prefill, decode,
                                      page_size=page_size, segment_len=segment_len)
    replaced = extra["replaced"].astype(bool)
    stats = rollouts.stats
    stats["replaced_tokens"] = int(replaced.sum())
    stats["replaced_fraction"] = stats["replaced_tokens"] / max(stats["decode_tokens"], 1)
    stats["rows_replaced"] = int(replaced.any(axis=1).sum())
    return Lockstep(rollouts=rollouts, replaced=replaced, score=extra["score"],
                    logp_base=extra["logp_base"], logp_rl=extra["logp_rl"], stats=stats)
