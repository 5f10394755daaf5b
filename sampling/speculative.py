"""Lossless speculative decoding: the acceptance rule and a model-free drafter.

A drafter proposes up to k tokens per row; the policy scores the row's context plus the
drafts in one forward, giving its sampling distribution p_j at each of the k + 1
positions; `verify` keeps a prefix of the drafts and appends one token of its own, so
that the tokens a row emits are distributed exactly as plain sampling from p would
emit them (Leviathan et al. 2023, Chen et al. 2023):

  for j = 0, 1, ...: accept draft x_j with probability min(1, p_j(x_j) / q_j(x_j));
  at the first rejection emit a token from norm(max(0, p_j - q_j)) and stop;
  if every proposed draft is accepted, emit a token from p_{k'} (k' drafts proposed).

A model-free drafter proposes one sequence, q_j = a point mass on x_j: acceptance is
p_j(x_j) and a rejection draws from p_j without x_j. At temperature 0 p_j is the point
mass on the argmax, so the emitted tokens are exactly greedy decoding's.

`ngram_draft` is the model-free drafter: the continuation, in the row's own tokens or
its group's (the samples of one prompt share most of their text in RL), of the
latest earlier occurrence of the row's last n tokens, longest n first.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf


def verify(target_logp: jax.Array, draft: jax.Array, proposed: jax.Array, key: jax.Array,
           draft_logp: jax.Array | None = None):
    """The acceptance rule over a batch of rows.

    Args:
      target_logp: [B, k + 1, V] log p_j, the policy's sampling distribution at position
        j given the context and draft[:, :j] (-inf where filtered).
      draft: [B, k] int32 proposed tokens; only the first `proposed` [B] (0..k) count.
      key: a PRNG key (each row and position draws its own numbers).
      draft_logp: [B, k, V] log q_j of a drafter that samples, or None: a drafter that
        proposes one sequence (q_j a point mass).

    Returns:
      (accepted [B] int32 in [0, proposed], tokens [B, k + 1] int32: the accepted drafts,
      then the emitted token at position `accepted`, then 0).
    """
    b, k1, v = target_logp.shape
    k = k1 - 1
    u_key, draw_key = jax.random.split(key)
    logp = target_logp[:, :k]                                           # [B, k, V]
    p_x = jnp.exp(jnp.take_along_axis(logp, draft[..., None], axis=-1)[..., 0])  # [B, k]
    if draft_logp is None:
        q_x = jnp.ones_like(p_x)
    else:
        q_x = jnp.exp(jnp.take_along_axis(draft_logp, draft[..., None], axis=-1)[..., 0])
    u = jax.random.uniform(u_key, (b, k), jnp.float32)
    ok = (u * q_x < p_x) & (jnp.arange(k)[None] < proposed[:, None])    # u < p/q, q > 0
    accepted = jnp.sum(jnp.cumprod(ok, axis=1), axis=1).astype(jnp.int32)
    at = jnp.minimum(accepted, k)
    p_at = jnp.take_along_axis(target_logp, at[:, None, None], axis=1)[:, 0]   # [B, V]
    rejected = accepted < proposed
    residual = _residual(p_at, draft, draft_logp, at, k)
    final = jnp.where(rejected[:, None], residual, p_at)
    token = jax.random.categorical(draw_key, final, axis=-1).astype(jnp.int32)
    j = jnp.arange(k + 1)[None]
    padded = jnp.concatenate([draft, jnp.zeros((b, 1), draft.dtype)], axis=1)
    tokens = jnp.where(j < accepted[:, None], padded, jnp.where(j == accepted[:, None],
                                                                 token[:, None], 0))
    return accepted, tokens.astype(jnp.int32)


def _residual(p_at, draft, draft_logp, at, k: int):
    """log norm(max(0, p - q)) at each row's first rejected position (unnormalised logs;
    `jax.random.categorical` normalises). A point-mass q removes the drafted token."""
    x = jnp.take_along_axis(draft, jnp.minimum(at, k - 1)[:, None], axis=1)[:, 0]
    if draft_logp is None:
        return jnp.where(jnp.arange(p_at.shape[-1])[None] == x[:, None], NEG_INF, p_at)
    q_at = jnp.take_along_axis(draft_logp, jnp.minimum(at, k - 1)[:, None, None], axis=1)[:, 0]
    diff = jnp.maximum(jnp.exp(p_at) - jnp.exp(q_at), 0.0)
    return jnp.where(diff > 0, jnp.log(jnp.where(diff > 0, diff, 1.0)), NEG_INF)


def ngram_draft(history: jax.Array, lengths: jax.Array, members: jax.Array, n_max: int,
                k: int, n_min: int = 1):
    """Drafts from the rows' own and their group's text (prompt lookup over a group).

    history [B, T] int32 each row's tokens (prompt then generated); lengths [B];
    members [B, M] int32 the rows each row searches in priority order, itself first
    (-1: unused). For n from n_max down to n_min, the row's last n tokens are looked up
    in its members' text: the first member with an occurrence followed by at least one
    token wins, at its latest such occurrence (an occurrence may overlap the row's own
    last n tokens: a repeating pattern continues). The draft is up to k tokens of what
    follows.

    Returns (draft [B, k] int32, 0 past `proposed`; proposed [B] int32 in [0, k])."""
    b, t = history.shape
    m = members.shape[1]
    pos = jnp.arange(t)
    text = history[jnp.maximum(members, 0)]                                # [B, M, T]
    text_len = jnp.where(members >= 0, lengths[jnp.maximum(members, 0)], 0)  # [B, M]
    rank = (m - 1 - jnp.arange(m))[None, :, None] * t                      # earlier member first
    best = jnp.full((b,), -1, jnp.int32)                                   # member * T + end
    for n in range(n_max, n_min - 1, -1):
        last = lengths[:, None] - n + jnp.arange(n)[None]                  # [B, n]
        tail = jnp.take_along_axis(history, jnp.maximum(last, 0), axis=1)
        match = (pos >= n) & (pos < text_len[:, :, None]) & (lengths >= n)[:, None, None]
        for i in range(n):  # text[.., e - n + i] == tail[i]: an occurrence ending before e
            match &= jnp.roll(text, n - i, axis=2) == tail[:, i, None, None]
        score = jnp.where(match, rank + pos, -1).reshape(b, -1)
        found = jnp.max(score, axis=1) >= 0
        flat = jnp.argmax(score, axis=1).astype(jnp.int32)
        member = flat // t
        best = jnp.where((best < 0) & found, member * t + flat % t, best)
    member, end = jnp.maximum(best, 0) // t, jnp.maximum(best, 0) % t
    rows = jnp.arange(b)
    j = jnp.arange(k)[None]
    available = jnp.where(best >= 0, text_len[rows, member] - end, 0)
    # in the row's own text the match's continuation runs into the row's end: the text
    # since the match repeats (period `available`), as a repeating pattern would go on
    own = (member == 0)[:, None] & (available > 0)[:, None]
    step = jnp.where(own, j % jnp.maximum(available, 1)[:, None], j)
    draft = jnp.take_along_axis(text[rows, member], jnp.minimum(end[:, None] + step, t - 1),
                                axis=1)
    proposed = jnp.clip(jnp.where(own[:, 0], k, available), 0, k).astype(jnp.int32)
    return jnp.where(j < proposed[:, None], draft, 0).astype(jnp.int32), proposed
