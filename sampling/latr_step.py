"""LATR inside the decode loop: the per-step pick that branches, prunes and ends the tree
phase, and the jitted decode program that runs it (`sampling.latr` is the host side).

Each step t, before the token (the authors' end-of-step checks of step t - 1):
  1. prune: a branch r = t - birth tokens old (r in the lookahead points) whose tokens
     stay close to its parent's is removed with its descendants (`latr_rules.prune`);
  2. end of the tree phase: when the groups are full enough and no branch is young
     (`latr_rules.full`), or at `max_steps`; a group's free slots are then filled with
     copies of its root;
  3. branch: a running tree row whose two most likely tokens are close (p2 > abs and
     p1 - p2 < rel, raw probabilities) spawns a child into a free slot of its group
     (`latr_rules.match`); the child takes the second token and the row the first;
  4. tokens: tree rows take their top token (greedy); plain rows, and every row after
     the tree phase, draw from the sampling distribution with their own random number.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from models.config import ModelConfig
from sampling import engine, latr_rules, processors
from sampling.params import SamplingParams


@dataclasses.dataclass(frozen=True)
class LatrConfig:
    """LATR's settings (static: a change compiles a new program). Defaults: the
    authors' countdown and math scripts.

    Attributes:
      width: tree rows per prompt (the rest of its n samples are drawn plainly from
        the start); the authors' round(n · mix_ratio). 0 < width <= n.
      abs_threshold: a row branches when its second most likely token's probability
        is above this ...
      rel_threshold: ... and within this of the most likely one's (p1 - p2 < rel).
      lookahead: the branch ages (tokens, the branch token included) at which a branch
        is compared with its parent.
      prune_distance: a branch whose normalised edit distance to its parent over those
        tokens is below this is pruned, with its descendants.
      fill_init, fill_decay: the tree phase ends once the groups hold round(width ·
        prompts · (fill_init - fill_decay · t / max_new_tokens)) rows (a finished
        group counts as full) and no branch is younger than max(lookahead) steps ...
      max_steps: ... or after this many steps.
      keep_math_symbols: a branch whose parent's token at the branch point is a math
        symbol is never pruned (`sampling.latr.math_symbol_tokens`).
    """

    width: int
    abs_threshold: float = 0.25
    rel_threshold: float = 0.15
    lookahead: tuple[int, ...] = (20, 30, 50)
    prune_distance: float = 0.4
    fill_init: float = 0.98
    fill_decay: float = 0.05
    max_steps: int = 512
    keep_math_symbols: bool = True

    def __post_init__(self):
        if not isinstance(self.width, int) or self.width < 1:
            raise ValueError(f"latr width must be an int >= 1, got {self.width!r}")
        for name in ("abs_threshold", "rel_threshold", "prune_distance"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"latr {name} must be in [0, 1], got {getattr(self, name)}")
        object.__setattr__(self, "lookahead", tuple(int(r) for r in self.lookahead))
        if not self.lookahead or min(self.lookahead) < 1:
            raise ValueError(f"latr lookahead must be positive ints, got {self.lookahead}")
        if self.max_steps < 1:
            raise ValueError(f"latr max_steps must be >= 1, got {self.max_steps}")

    @property
    def history(self) -> int:
        """Steps of tokens each row keeps on device for the pruning windows."""
        return engine.next_pow2(max(self.lookahead) + 1)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class LatrState:
    """The tree's device state, carried from call to call ([S] per row)."""

    t: jax.Array          # [] int32 the global step of the next token
    on: jax.Array         # [] bool the tree phase runs
    tree: jax.Array       # tree slots (the others: plain rows and padding)
    group: jax.Array      # int32 prompt of each row (-1: padding)
    alive: jax.Array      # a tree slot holds a row (plain rows: True)
    parent: jax.Array     # int32 the row a branch was born from (-1: root, plain, fill)
    birth: jax.Array      # int32 the step of a branch's first token (roots: 0)
    order: jax.Array      # int32 creation order (the authors' batch order)
    history: jax.Array    # [S, H] int32 tokens by step mod H (STOPPED where not running)
    origin: jax.Array     # int32 the row (at the call's start) whose tokens a row continues
    counts: jax.Array     # [5] int32 branches born, pruned, suppressed, rows filled,
    #                       tokens decoded
    end: jax.Array        # [] int32 the step the tree phase ended (-1: still on)


def _tree_phase(st: LatrState, latr: LatrConfig, done, stops, exempt, needed):
    """Steps 1-2 before step st.t: (the branches pruned, the rows removed with their
    descendants, whether the phase ends now); nothing once the phase is over."""
    def checks():
        pruned = latr_rules.prune(st.history, st.t, st.alive & st.tree, st.parent, st.birth,
                                  stops, exempt, latr.lookahead, latr.prune_distance)
        removed = latr_rules.descendants(pruned, st.alive & st.tree, st.parent)
        alive = st.alive & ~removed
        ends = latr_rules.full(alive, done & alive, st.tree, st.group, st.parent, st.birth,
                               st.t - 1, latr.width,
                               needed[jnp.clip(st.t - 1, 0, needed.shape[0] - 1)],
                               max(latr.lookahead))
        return pruned, removed, (st.t > 0) & ends | (st.t >= latr.max_steps)

    def over():
        none = jnp.zeros_like(st.alive)
        return none, none, jnp.bool_(False)

    return jax.lax.cond(st.on, checks, over)


def _fill(st: LatrState, alive, done):
    """(src, born) of the tree phase's end: a group's free slots copy its root."""
    free = st.tree & ~alive & (st.group >= 0)
    root = st.tree & alive & (st.parent < 0)
    same = latr_rules.same_group(st.group) & root[None]
    src = jnp.where(free, jnp.argmax(same, axis=1).astype(jnp.int32),
                    jnp.arange(free.shape[0], dtype=jnp.int32))
    return src, free & jnp.any(same, axis=1)


def _branch(st: LatrState, latr: LatrConfig, alive, running, top_p):
    """(src, born, suppressed) of step 3: candidates (raw top-2 probabilities `top_p`
    [S, 2] close) matched to free slots."""
    close = ((top_p[:, 1] > latr.abs_threshold)
             & (top_p[:, 0] - top_p[:, 1] < latr.rel_threshold))
    candidate = st.tree & running & close
    free = st.tree & ~alive & (st.group >= 0)
    return latr_rules.match(candidate, free, st.group, st.order)


def pick(st: LatrState, latr: LatrConfig, sp: SamplingParams, stops, exempt, needed,
         logits, key, active, ids):
    """One step's tokens under LATR: (tokens, logp, raw logp, {}, state, (src, done))
    for `engine.decode_loop(..., fork=True)`; `active` [S] the rows running before it;
    `needed` [max_steps] the rows that make the groups full after each step."""
    logits = logits[0]
    done = ~active
    pruned, removed, ends = _tree_phase(st, latr, done, stops, exempt, needed)
    alive, done = st.alive & ~removed, done | removed
    on = st.on & ~ends
    top_logit, top_id = jax.lax.top_k(logits.astype(jnp.float32), 2)        # [S, 2]
    lse = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)

    def branch():
        return _branch(st, latr, alive, ~done, jnp.exp(top_logit - lse[:, None]))

    def fill():
        src, born = _fill(st, alive, done)
        return src, born, jnp.int32(0)

    def neither():
        index = jnp.arange(alive.shape[0], dtype=jnp.int32)
        return index, jnp.zeros_like(alive), jnp.int32(0)

    src, born, suppressed = jax.lax.cond(on, branch, lambda: jax.lax.cond(ends, fill, neither))
    child = born & on
    done = jnp.where(born, done[src], done)
    token, logp, raw = _tokens(logits, top_logit, top_id, lse, src, child, born & ~child,
                               on & st.tree, on, sp, key, ids)
    def created():  # a step's children are created in their parents' order
        older = st.order[src]
        return jnp.where(child, jnp.max(st.order) + 1 + jnp.sum(
            child[None] & (older[None] < older[:, None]), axis=1), st.order)

    order = jax.lax.cond(jnp.any(child), created, lambda: st.order)  # [S, S] only then
    history = st.history[src].at[:, st.t % st.history.shape[1]].set(
        jnp.where(done, latr_rules.STOPPED, token))
    st = dataclasses.replace(
        st, t=st.t + 1, on=on, alive=alive | born, history=history, origin=st.origin[src],
        parent=jnp.where(child, src, jnp.where(born, -1, st.parent)),
        birth=jnp.where(child, st.t, st.birth), order=order,
        counts=st.counts + jnp.stack([jnp.sum(child), jnp.sum(pruned), suppressed,
                                      jnp.sum(born & ~child), jnp.sum(~done)]).astype(jnp.int32),
        end=jnp.where(ends, st.t, st.end))
    return token, logp, raw, {}, st, (src, done)


def _tokens(logits, top_logit, top_id, lse, src, child, filled, chose, on,
            sp: SamplingParams, key, ids):
    """(token, logp under `sp`, raw logp) [S] of step 4. Rows that `chose` take their
    source row's top token, a `child` its second; the others draw from their source's
    logits (a copy's differ from its own only in the step a fill copies them)."""
    def chosen_logp():  # [S, 2] the top-2 tokens' log-probs under `sp`
        return jnp.take_along_axis(processors.sampling_logprobs(logits, sp), top_id, axis=-1)

    top_logp = jax.lax.cond(on, chosen_logp, lambda: jnp.zeros(top_id.shape, jnp.float32))
    second = child.astype(jnp.int32)[:, None]
    greedy = jnp.take_along_axis(top_id[src], second, axis=1)[:, 0]
    greedy_logp = jnp.take_along_axis(top_logp[src], second, axis=1)[:, 0]
    greedy_raw = jnp.take_along_axis(top_logit[src], second, axis=1)[:, 0] - lse[src]
    logits = jax.lax.cond(jnp.any(filled), lambda: logits[src], lambda: logits)
    drawn, logp, raw = processors.sample(logits, key, sp, ids)
    return (jnp.where(chose, greedy, drawn).astype(jnp.int32),
            jnp.where(chose, greedy_logp, logp), jnp.where(chose, greedy_raw, raw))


def _decode(config: ModelConfig, params: dict, cache, state: engine.RowState, rng, call,
            limit, sp: SamplingParams, steps: int, stop_ids: tuple[int, ...], latr: LatrConfig,
            tree: LatrState, exempt, needed):
    """`engine.decode` with the LATR pick: (DecodeOutput, hidden [S, D], cache, LatrState)."""
    engine.TRACE_COUNTS["latr_decode"] += 1
    stops = jnp.asarray(stop_ids if stop_ids else (-1,), jnp.int32)

    def step(logits, key, st, active, ids):
        return pick(st, latr, sp, stops, exempt, needed, logits, key, active, ids)

    state = dataclasses.replace(state, hidden=(state.hidden,))
    tree = dataclasses.replace(tree, origin=jnp.arange(tree.origin.shape[0], dtype=jnp.int32))
    out, (hidden,), (cache,), tree = engine.decode_loop(
        ((config, params),), (cache,), state, rng, call, limit, steps, stop_ids, step,
        extra=tree, fork=True)
    return out, hidden, cache, tree


decode = engine.jit_decode(_decode, static_argnums=(0, 7, 8, 9, 10), donate_argnums=(2,))
