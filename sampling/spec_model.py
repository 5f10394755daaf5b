"""The small-model drafter of speculative decoding (`SpecConfig(drafter="model")`).

A second model with the policy's vocabulary (say the `tiny` preset for `small`, or a
0.5B model of the policy's family) drafts k tokens per row by its own decode. It keeps
a KV cache of its own under the policy's page tables, and that cache must hold every
token the rows have:

- its prompt prefill runs beside the policy's (`prefill`: one prompt layout, two
  caches);
- a decode call that does not speculate feeds each emitted token to both models
  (`plain_decode`: `engine.decode_loop` with two models, the policy alone picking, so
  the tokens are plain decoding's);
- in a speculative call (`sampling.spec_decode`) each iteration runs k + 1
  single-token forwards of the drafter from the row's pending token (`draft`): the
  first k draw the drafts from the drafter's sampling distribution q (every filter
  applied: at temperature 0 its greedy tokens), the last one only writes the k-th
  draft's keys. Whatever prefix the policy keeps, the drafter's tail then holds its
  keys; the keys past a row's count are overwritten by the next iteration, as the
  policy's are.

`verify` gets q, so the emitted tokens are distributed exactly as the policy's plain
samples (greedy: identical tokens), however good or bad the drafter is; a better
drafter only raises the tokens per forward.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from models.config import ModelConfig
from sampling import engine, processors
from sampling.kv_cache import head_logits


def check(config: ModelConfig, draft_config: ModelConfig) -> None:
    """ValueError unless the drafter can draft for the policy (same vocabulary)."""
    if not isinstance(draft_config, ModelConfig):
        raise TypeError(f"the draft model's config must be a ModelConfig, got "
                        f"{type(draft_config).__name__}")
    if draft_config.vocab_size != config.vocab_size:
        raise ValueError(f"the draft model's vocab_size ({draft_config.vocab_size}) differs "
                         f"from the policy's ({config.vocab_size})")


def prefill(pair: tuple, sharding):
    """`flat.run_groups`' prefill for the policy and the drafter, pair = ((config, params),
    (draft_config, draft_params)): -> (hidden (policy, drafter), caches (policy, drafter))."""
    def fill(num_pages, layout, rows, arms=None):
        del arms  # speculation runs without arms
        filled = [engine.prefill_layout(c, p, num_pages, layout, rows, sharding)
                  for c, p in pair]
        return tuple(h for h, _ in filled), tuple(c for _, c in filled)

    return fill


def draft(config: ModelConfig, decoder: tuple, forward, tails: tuple, token: jax.Array,
          start: jax.Array, k: int, sampling, key: jax.Array):
    """k drafts per row by the drafter's own decode.

    decoder: the drafter's (layers, output matrix); forward(config, decoder, tails, chunk
    [S, 1], start [S]) -> (hidden [S, 1, D], tails), its forward over the pages that reads
    its tail columns < start and writes the chunk's keys at start (`spec_decode._forward`);
    token [S]: the pending token, whose keys are not yet in the tail, at column start [S].
    Returns (draft [S, k] int32, q [S, k, V] fp32 the drafter's sampling log-probs at
    each draft, tails with the keys of the pending token and all k drafts)."""
    def step(carry, j):
        tok, tails = carry
        hidden, tails = forward(config, decoder, tails, tok[:, None], start + j)
        q = processors.sampling_logprobs(head_logits(decoder[1], hidden[:, 0]), sampling)
        nxt = jax.random.categorical(jax.random.fold_in(key, j), q, axis=-1)
        return (nxt.astype(jnp.int32), tails), (nxt.astype(jnp.int32), q)

    (_, tails), (drafts, q) = jax.lax.scan(step, (token, tails), jnp.arange(k + 1))
    return drafts[:k].T, q[:k].transpose(1, 0, 2), tails


def _plain(config: ModelConfig, draft_config: ModelConfig, params: dict, draft_params: dict,
           caches: tuple, state: engine.RowState, rng: jax.Array, call: jax.Array,
           limit: jax.Array, sampling, steps: int, stop_ids: tuple[int, ...], sharding):
    """`engine._decode` with the drafter fed the same tokens: the policy's logits pick
    (the same keys, so the same tokens as a plain call), both caches get the keys.
    `state.hidden` and `caches` are (policy, drafter) -> (out, hidden, caches)."""
    engine.TRACE_COUNTS["spec_plain_decode"] += 1
    out, hidden, caches, _ = engine.decode_loop(
        ((config, params), (draft_config, draft_params)), caches, state, rng, call, limit,
        steps, stop_ids, engine.policy_pick(sampling), sharding=sharding)
    return out, hidden, caches


_plain_program = engine.jit_decode(_plain, static_argnums=(0, 1, 9, 10, 11, 12),
                                   donate_argnums=(4,))


def plain_decode(model: tuple, drafter: tuple, sampling):
    """The decode call of a generate call's plain segments, `(caches, state, seg, limit,
    steps) -> (out, hidden, caches)`; model = (config, params, rng, stop_ids, sharding),
    drafter = (draft_config, draft_params)."""
    config, params, rng, stop_ids, sharding = model

    def call(caches, state, seg, limit, steps, arms=None):
        del arms
        return _plain_program(config, drafter[0], params, drafter[1], caches, state, rng,
                              np.int32(seg), limit, sampling, steps, stop_ids, sharding)

    return call
