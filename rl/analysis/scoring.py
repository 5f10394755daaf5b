"""Teacher-forced scoring of the same sequences under two models, token by token.

    stats = score_pair(config_a, params_a, config_b, params_b, tokens, segment_ids)
    stats["delta_logp"]    # [B, T] log π_b(token_t | <t) − log π_a(token_t | <t)

Entry t of every output describes token t, predicted from tokens < t (t = 0
has no prediction and is 0). With a = the base model and b = the RL model,
`delta_logp` is the signed Δlog p = log π_RL − log π_base of the realised token.

Outputs ([B, T] fp32, at temperature 1):

  logp_a, logp_b       log-probability of the realised token under each model
  delta_logp           logp_b − logp_a (exactly 0 when a and b are the same model)
  entropy_a, entropy_b entropy of each next-token distribution (nats)
  kl_ab, kl_ba         KL(π_a‖π_b) and KL(π_b‖π_a) over the vocabulary
  js                   Jensen-Shannon divergence, in [0, log 2]
  rank_a, rank_b       rank of the realised token (0 = the model's argmax)
  topk_overlap         |top-k(π_a) ∩ top-k(π_b)| / k
  a_top1, b_on_a_top1  π_a and π_b mass on π_a's argmax token
  a_topk, b_on_a_topk  π_a and π_b mass on π_a's top-k set

Memory: logits are never formed for the whole sequence. Positions are
processed `position_chunk` at a time (`lax.map`), and when the vocabulary is
larger than `vocab_chunk` each block of positions is reduced over vocabulary
chunks in two passes (the normalisers and running top-k, then the sums that
need them), so a 150k vocabulary at 8k tokens needs
position_chunk × vocab_chunk floats per temporary instead of T × V.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import chex
import jax
import jax.numpy as jnp

import models
from models.config import ModelConfig
from sampling.kv_cache import output_head

FIELDS = ("logp_a", "logp_b", "delta_logp", "entropy_a", "entropy_b", "kl_ab", "kl_ba", "js",
          "rank_a", "rank_b", "topk_overlap", "a_top1", "b_on_a_top1", "a_topk", "b_on_a_topk")
_LOG2 = math.log(2.0)


@dataclasses.dataclass(frozen=True)
class ScoreOptions:
    """Static options of `score_pair`.

    top_k: the k of `topk_overlap`, `a_topk` and `b_on_a_topk`.
    position_chunk: positions whose logits exist at once (per model).
    vocab_chunk: the widest vocabulary slice materialised; a larger vocabulary
      is reduced in slices of this size (two passes over the output head).
    """

    top_k: int = 8
    position_chunk: int = 1024
    vocab_chunk: int = 32768

    def __post_init__(self):
        for name in ("top_k", "position_chunk", "vocab_chunk"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ScoreOptions.{name} must be an int >= 1, got {value!r}")


def check_pair(config_a: ModelConfig, config_b: ModelConfig) -> None:
    """ValueError unless the two models share a vocabulary (same ids, same size)."""
    if config_a.vocab_size != config_b.vocab_size:
        raise ValueError(f"the two models' vocabularies differ ({config_a.vocab_size} vs "
                         f"{config_b.vocab_size} ids): token-level comparison needs one "
                         "tokenizer")


def _dense_stats(xa, xb, targets, k):
    """All statistics from full fp32 logits xa, xb [N, V] and targets [N]."""
    la = jax.nn.log_softmax(xa, axis=-1)
    lb = jax.nn.log_softmax(xb, axis=-1)
    pa, pb = jnp.exp(la), jnp.exp(lb)
    t = targets[:, None]
    ta = jnp.take_along_axis(xa, t, axis=-1)
    tb = jnp.take_along_axis(xb, t, axis=-1)
    logm = jnp.logaddexp(la, lb) - _LOG2
    _, idx_a = jax.lax.top_k(xa, k)
    _, idx_b = jax.lax.top_k(xb, k)
    la_k = jnp.take_along_axis(la, idx_a, axis=-1)
    lb_k = jnp.take_along_axis(lb, idx_a, axis=-1)
    return {
        "logp_a": jnp.take_along_axis(la, t, axis=-1)[:, 0],
        "logp_b": jnp.take_along_axis(lb, t, axis=-1)[:, 0],
        "entropy_a": -jnp.sum(pa * la, axis=-1),
        "entropy_b": -jnp.sum(pb * lb, axis=-1),
        "kl_ab": jnp.sum(pa * (la - lb), axis=-1),
        "kl_ba": jnp.sum(pb * (lb - la), axis=-1),
        "js": 0.5 * jnp.sum(pa * (la - logm) + pb * (lb - logm), axis=-1),
        "rank_a": jnp.sum(xa > ta, axis=-1).astype(jnp.float32),
        "rank_b": jnp.sum(xb > tb, axis=-1).astype(jnp.float32),
        "topk_overlap": _overlap(idx_a, idx_b),
        "a_top1": jnp.exp(la_k[:, 0]), "b_on_a_top1": jnp.exp(lb_k[:, 0]),
        "a_topk": jnp.sum(jnp.exp(la_k), axis=-1), "b_on_a_topk": jnp.sum(jnp.exp(lb_k), axis=-1),
    }


def _overlap(idx_a, idx_b):
    """[N] |idx_a ∩ idx_b| / k for top-k index sets [N, k] (indices are distinct)."""
    return jnp.mean(jnp.any(idx_a[:, :, None] == idx_b[:, None, :], axis=-1), axis=-1)


def _merge_topk(vals, idx, new_vals, new_idx, k):
    v = jnp.concatenate([vals, new_vals], axis=-1)
    i = jnp.concatenate([idx, new_idx], axis=-1)
    v, pos = jax.lax.top_k(v, k)
    return v, jnp.take_along_axis(i, pos, axis=-1)


def head_slices(w: jax.Array, vocab_chunk: int) -> jax.Array:
    """An output head [D, V] as [C, D, vocab_chunk] slices (zero-padded; the padded
    columns are masked to -inf where used). Built once per `score_pair` call."""
    v = w.shape[1]
    chunks = -(-v // vocab_chunk)
    w = jnp.pad(w, ((0, 0), (0, chunks * vocab_chunk - v)))
    return w.reshape(w.shape[0], chunks, vocab_chunk).transpose(1, 0, 2)


def _chunked_stats(ha, hb, wa, wb, wa_s, wb_s, targets, k):
    """The statistics of `_dense_stats` from hidden states ha, hb [N, D], output
    heads wa, wb [D, V] and their `head_slices` wa_s, wb_s [C, D, Vc], never
    forming more than Vc logits per row.

    Pass 1 scans the vocabulary slices for each model's logsumexp (online, with
    a running max) and running top-k; pass 2 sums the entropy, KL, JS and rank
    terms, which need the normalisers. Padded vocabulary columns are -inf.
    """
    n = ha.shape[0]
    v = wa.shape[1]
    chunks, _, vocab_chunk = wa_s.shape
    offsets = jnp.arange(chunks, dtype=jnp.int32) * vocab_chunk
    neg = jnp.float32(-jnp.inf)

    def logits(h, w, off):
        x = jnp.dot(h, w, preferred_element_type=jnp.float32)
        valid = (off + jnp.arange(vocab_chunk)) < v
        return jnp.where(valid[None], x, neg)

    def pass1(carry, inputs):
        (ma, sa, va, ia), (mb, sb, vb, ib) = carry
        w_a, w_b, off = inputs
        out = []
        for (m, s, vals, idx), h, w in (((ma, sa, va, ia), ha, w_a), ((mb, sb, vb, ib), hb, w_b)):
            x = logits(h, w, off)
            m_new = jnp.maximum(m, jnp.max(x, axis=-1))
            s = s * jnp.exp(m - m_new) + jnp.sum(jnp.exp(x - m_new[:, None]), axis=-1)
            cv, ci = jax.lax.top_k(x, min(k, vocab_chunk))
            vals, idx = _merge_topk(vals, idx, cv, ci + off, k)
            out.append((m_new, s, vals, idx))
        return tuple(out), None

    init = (jnp.full(n, neg), jnp.zeros(n), jnp.full((n, k), neg), jnp.zeros((n, k), jnp.int32))
    ((ma, sa, vals_a, idx_a), (mb, sb, _, idx_b)), _ = jax.lax.scan(
        pass1, (init, init), (wa_s, wb_s, offsets))
    lse_a, lse_b = ma + jnp.log(sa), mb + jnp.log(sb)

    # Realised-token and top-k logits straight from the head's columns.
    ta = jnp.einsum("nd,dn->n", ha, wa[:, targets], preferred_element_type=jnp.float32)
    tb = jnp.einsum("nd,dn->n", hb, wb[:, targets], preferred_element_type=jnp.float32)
    xb_on_a = jnp.einsum("nd,dnk->nk", hb, wb[:, idx_a], preferred_element_type=jnp.float32)

    def pass2(acc, inputs):
        w_a, w_b, off = inputs
        xa, xb = logits(ha, w_a, off), logits(hb, w_b, off)
        la, lb = xa - lse_a[:, None], xb - lse_b[:, None]
        pa, pb = jnp.exp(la), jnp.exp(lb)
        valid = jnp.isfinite(xa)
        # The realised token's own column is not counted: `ta` (a dot with its
        # column) may round differently from the same entry of the block product.
        other = (off + jnp.arange(vocab_chunk))[None] != targets[:, None]
        la0, lb0 = jnp.where(valid, la, 0.0), jnp.where(valid, lb, 0.0)
        logm = jnp.where(valid, jnp.logaddexp(la, lb) - _LOG2, 0.0)
        terms = (-jnp.sum(pa * la0, -1), -jnp.sum(pb * lb0, -1),
                 jnp.sum(pa * (la0 - lb0), -1), jnp.sum(pb * (lb0 - la0), -1),
                 0.5 * jnp.sum(pa * (la0 - logm) + pb * (lb0 - logm), -1),
                 jnp.sum((xa > ta[:, None]) & other, -1).astype(jnp.float32),
                 jnp.sum((xb > tb[:, None]) & other, -1).astype(jnp.float32))
        return tuple(a + t for a, t in zip(acc, terms, strict=True)), None

    zeros = tuple(jnp.zeros(n) for _ in range(7))
    sums, _ = jax.lax.scan(pass2, zeros, (wa_s, wb_s, offsets))
    ent_a, ent_b, kl_ab, kl_ba, js, rank_a, rank_b = sums
    la_k = vals_a - lse_a[:, None]
    lb_k = xb_on_a - lse_b[:, None]
    return {
        "logp_a": ta - lse_a, "logp_b": tb - lse_b, "entropy_a": ent_a, "entropy_b": ent_b,
        "kl_ab": kl_ab, "kl_ba": kl_ba, "js": js, "rank_a": rank_a, "rank_b": rank_b,
        "topk_overlap": _overlap(idx_a, idx_b),
        "a_top1": jnp.exp(la_k[:, 0]), "b_on_a_top1": jnp.exp(lb_k[:, 0]),
        "a_topk": jnp.sum(jnp.exp(la_k), axis=-1), "b_on_a_topk": jnp.sum(jnp.exp(lb_k), axis=-1),
    }


def _block_stats(config_a, head_a, head_b, slices, ha, hb, targets, options):
    """Statistics of one block of positions: hidden states [N, D] -> dict of [N]."""
    k = min(options.top_k, config_a.vocab_size)
    if slices is None:
        xa = jnp.dot(ha, head_a, preferred_element_type=jnp.float32)
        xb = jnp.dot(hb, head_b, preferred_element_type=jnp.float32)
        return _dense_stats(xa, xb, targets, k)
    return _chunked_stats(ha, hb, head_a, head_b, *slices, targets, k)


@functools.partial(jax.jit, static_argnames=("config_a", "config_b", "options"))
def score_pair(config_a: ModelConfig, params_a: dict, config_b: ModelConfig, params_b: dict,
               tokens: jax.Array, segment_ids: jax.Array | None = None,
               options: ScoreOptions = ScoreOptions()) -> dict[str, jax.Array]:
    """Per-position statistics of `tokens` [B, T] under models a and b (see module doc).

    `segment_ids` [B, T] (1 = real, 0 = right padding) keeps padding out of the
    real tokens' attention; outputs at padded positions are meaningless. Returns
    a dict of `FIELDS` -> fp32 [B, T], entry 0 of every row being 0.
    """
    check_pair(config_a, config_b)
    chex.assert_rank(tokens, 2)
    b, t = tokens.shape
    h_a = models.hidden_states(config_a, params_a, tokens, segment_ids=segment_ids)
    h_b = models.hidden_states(config_b, params_b, tokens, segment_ids=segment_ids)
    n = b * (t - 1)
    size = min(options.position_chunk, max(n, 1))
    blocks = -(-n // size)
    pad = blocks * size - n

    def flat(h):  # [B, T, D] -> [blocks, size, D]: position t-1 predicts token t
        h = h[:, :-1].reshape(n, h.shape[-1])
        return jnp.pad(h, ((0, pad), (0, 0))).reshape(blocks, size, h.shape[-1])

    targets = jnp.pad(tokens[:, 1:].reshape(n), (0, pad)).reshape(blocks, size)
    head_a, head_b = output_head(config_a, params_a), output_head(config_b, params_b)
    slices = None
    if config_a.vocab_size > options.vocab_chunk:  # sliced once, outside the loop
        slices = (head_slices(head_a, options.vocab_chunk),
                  head_slices(head_b, options.vocab_chunk))
    stats = jax.lax.map(
        lambda xs: _block_stats(config_a, head_a, head_b, slices, *xs, options),
        (flat(h_a), flat(h_b), targets))
    out = {}
    for name, value in stats.items():
        value = value.reshape(blocks * size)[:n].reshape(b, t - 1)
        out[name] = jnp.pad(value, ((0, 0), (1, 0)))
    out["js"] = jnp.clip(out["js"], 0.0, _LOG2)
    out["delta_logp"] = out["logp_b"] - out["logp_a"]
    return {name: out[name] for name in FIELDS}
