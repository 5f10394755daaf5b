"""KL estimators between the policy and a frozen reference, per token.

`estimate(kind, logp, ref_logp)` with log r = ref_logp - logp (Schulman's
notation, samples drawn from the policy):

  k1   -log r = logp - ref_logp          unbiased, high variance, can be < 0
  k2   (log r)^2 / 2                      biased, low variance, >= 0
  k3   r - 1 - log r                      unbiased, low variance, >= 0

As a loss term (`rl.algorithms.losses.compute(..., kl_coef=β)`), on-policy samples:
the expected gradient of k2 is ∇KL(π_θ‖π_ref), that of k3 is ∇KL(π_ref‖π_θ),
and that of k1 is zero. GRPO uses k3; the kind is a config knob. As a reward penalty
(`reward_penalty`) the estimate is detached and subtracted per token.

Also full-vocabulary divergences on logits ([..., V]) for analysis and the
divergence-weighted advantage: `full_kl`, `js_divergence`, `entropy`.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rl.algorithms import ops
from rl.registry import Registry

KL_ESTIMATORS: Registry = Registry("KL estimator")


@KL_ESTIMATORS.register("k1")
def _k1(log_ratio: jax.Array) -> jax.Array:
    return -log_ratio


@KL_ESTIMATORS.register("k2")
def _k2(log_ratio: jax.Array) -> jax.Array:
    return 0.5 * jnp.square(log_ratio)


@KL_ESTIMATORS.register("k3")
def _k3(log_ratio: jax.Array) -> jax.Array:
    return jnp.expm1(log_ratio) - log_ratio


def estimate(kind: str, logp, ref_logp, *, clamp: float | None = None) -> jax.Array:
    """Per-token KL estimate of `kind` (k1|k2|k3), same shape as `logp`.

    `clamp` bounds log r to [-clamp, clamp] first (verl clamps at 20 for k3 to
    avoid exp overflow); None leaves it unbounded.
    """
    fn = KL_ESTIMATORS.get(kind)
    logp, ref_logp = ops.as_float(logp), ops.as_float(ref_logp)
    chex.assert_equal_shape([logp, ref_logp])
    log_ratio = ref_logp - logp
    if clamp is not None:
        log_ratio = jnp.clip(log_ratio, -clamp, clamp)
    return fn(log_ratio)


def reward_penalty(kind: str, logp, ref_logp, mask, coef: float,
                   *, clamp: float | None = None) -> jax.Array:
    """[N, T] per-token reward -coef·KL (detached, 0 outside mask); feeds
    `rl.algorithms.advantages.compute("reinforce_pp", ..., token_rewards=...)`."""
    kl = jax.lax.stop_gradient(estimate(kind, logp, ref_logp, clamp=clamp))
    return jnp.where(jnp.asarray(mask).astype(bool), -coef * kl, 0.0)


def names() -> list[str]:
    return KL_ESTIMATORS.names()


def entropy(logits: jax.Array) -> jax.Array:
    """[...] entropy of softmax(logits [..., V]) in nats, computed in fp32."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def full_kl(logits_p: jax.Array, logits_q: jax.Array) -> jax.Array:
    """[...] exact KL(p‖q) over the vocabulary from logits [..., V]."""
    chex.assert_equal_shape([logits_p, logits_q])
    logp = jax.nn.log_softmax(logits_p.astype(jnp.float32), axis=-1)
    logq = jax.nn.log_softmax(logits_q.astype(jnp.float32), axis=-1)
    return jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)


def js_divergence(logits_p: jax.Array, logits_q: jax.Array) -> jax.Array:
    """[...] Jensen-Shannon divergence (nats, in [0, log 2]) from logits [..., V]."""
    chex.assert_equal_shape([logits_p, logits_q])
    logp = jax.nn.log_softmax(logits_p.astype(jnp.float32), axis=-1)
    logq = jax.nn.log_softmax(logits_q.astype(jnp.float32), axis=-1)
    logm = jnp.logaddexp(logp, logq) - jnp.log(2.0)
    kl_pm = jnp.sum(jnp.exp(logp) * (logp - logm), axis=-1)
    kl_qm = jnp.sum(jnp.exp(logq) * (logq - logm), axis=-1)
    return jnp.maximum(0.5 * (kl_pm + kl_qm), 0.0)
