"""Shared-prefix forward: G continuations of one prompt, the prompt computed once.

    hp, hc = models.shared_prefix_hidden_states(
        config, params, prompts [P, Tp], prompt_lens [P], continuations [P, G, S])

A GRPO batch holds G samples of every prompt. Run row by row, each sample
recomputes its prompt: with W1's 40-token prompts and 64-token completions a
third of the learner's tokens are prompt copies. Here group p is one packed
row `[prompt (Tp slots, right-padded) | continuation 1 | ... | continuation
G]` of length L = Tp + G·S. Every per-token op (norms, projections, the MLP)
runs once on it; only attention is structured (`group_attention`):

  * prompt queries attend causally within the prompt;
  * continuation g's queries attend to the real prompt tokens (slots <
    prompt_lens[p]) and causally to continuation g itself, never to the
    other continuations or the prompt slot padding.

Continuation token j sits at RoPE position prompt_lens[p] + j, exactly where it
sits in the unshared row `prompt[:prompt_len] + continuation`, so the hidden
states equal `models.hidden_states` of each such row (the tests hold them to
1e-5 in fp32), and so do their gradients. The gradient of the shared prompt
is the sum over its G continuations, which is what G separate copies would
accumulate.

Attention: continuation (p, g) attends over [prompt p's keys (broadcast, not
recomputed) | its own keys] with `layers.attention`, S × (Tp + S) scores,
against (Tp + S)² for its unshared row; the prompt's Tp × Tp block is
computed once per group.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from models import layers
from models.config import ModelConfig
from models.sharding import ActivationSharding
from models.transformer import layer_stack


def group_attention(q: jax.Array, k: jax.Array, v: jax.Array, prompt_lens: jax.Array,
                    prompt_slots: int, groups: int) -> jax.Array:
    """Attention over packed group rows (see the module docstring).

    q: [P, L, H, Dh]; k, v: [P, L, K, Dh] with L = prompt_slots + groups·S;
    prompt_lens: int [P] (>= 1). Returns [P, L, H, Dh] in q.dtype; outputs at
    prompt padding slots are meaningless. Softmax runs in fp32, over the
    prompt and own-continuation keys jointly.
    """
    p, length, h, dh = q.shape
    kv = k.shape[2]
    tp, g = prompt_slots, groups
    s = (length - tp) // g
    if tp + g * s != length or s < 1:
        raise ValueError(f"length {length} is not prompt_slots {tp} + groups {g} × S")
    slot = jnp.arange(tp)
    causal = slot[:, None] >= slot[None, :]
    out_p = layers.attention(q[:, :tp], k[:, :tp], v[:, :tp],
                             jnp.broadcast_to(causal, (p, tp, tp)))
    # Continuation (p, g) attends to [prompt p keys | its own keys]: the prompt's
    # k/v are broadcast, not recomputed (their gradient is the sum over g).
    def keys(x):
        prompt = jnp.broadcast_to(x[:, None, :tp], (p, g, tp, kv, dh))
        own = x[:, tp:].reshape(p, g, s, kv, dh)
        return jnp.concatenate([prompt, own], axis=2).reshape(p * g, tp + s, kv, dh)

    real = jnp.broadcast_to((slot[None, :] < prompt_lens[:, None])[:, None, None, :],
                            (p, g, s, tp)).reshape(p * g, s, tp)
    own_causal = jnp.arange(s)[:, None] >= jnp.arange(s)[None, :]
    mask = jnp.concatenate([real, jnp.broadcast_to(own_causal, (p * g, s, s))], axis=2)
    out_c = layers.attention(q[:, tp:].reshape(p * g, s, h, dh), keys(k), keys(v), mask)
    return jnp.concatenate([out_p, out_c.reshape(p, g * s, h, dh)], axis=1)


def shared_prefix_hidden_states(config: ModelConfig, params: dict, prompts: jax.Array,
                                prompt_lens: jax.Array, continuations: jax.Array, *,
                                sharding: ActivationSharding | None = None
                                ) -> tuple[jax.Array, jax.Array]:
    """Final-norm hidden states of prompts and their continuations.

    prompts [P, Tp] int (right-padded), prompt_lens [P] int (1..Tp),
    continuations [P, G, S] int -> (prompt hidden [P, Tp, D], continuation
    hidden [P, G, S, D]). Continuation (p, g) position j equals position
    prompt_lens[p] + j of `hidden_states(prompts[p, :prompt_lens[p]] +
    continuations[p, g])`.
    """
    chex.assert_rank([prompts, prompt_lens, continuations], [2, 1, 3])
    p, tp = prompts.shape
    _, g, s = continuations.shape
    chex.assert_shape(continuations, (p, g, s))
    tokens = jnp.concatenate([prompts, continuations.reshape(p, g * s)], axis=1)
    cont_pos = prompt_lens[:, None, None] + jnp.arange(s, dtype=jnp.int32)[None, None, :]
    positions = jnp.concatenate(
        [jnp.broadcast_to(jnp.arange(tp, dtype=jnp.int32), (p, tp)),
         jnp.broadcast_to(cont_pos, (p, g, s)).reshape(p, g * s).astype(jnp.int32)], axis=1)

    def attend(q, k, v, cache, layer):
        del layer
        return group_attention(q, k, v, prompt_lens, tp, g), cache

    x = layer_stack(config, params, tokens, positions, attend, sharding)
    return x[:, :tp], x[:, tp:].reshape(p, g, s, x.shape[-1])
