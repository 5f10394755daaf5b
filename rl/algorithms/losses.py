"""Policy losses, selected by name: `compute("ppo", logp, old_logp, adv, mask)`.

Each registered loss maps per-token log-probs to a per-token loss [N, T] and
indicator maps for metrics; `compute` adds what every loss shares: the
off-policy correction against the behaviour policy's log-probs
(rl.algorithms.off_policy: truncated or masked IS, an interpolated proximal
policy), FIPO reweighting, aggregation, a KL term to a frozen reference, an
entropy bonus, and the metrics. Formulas and sources: docs/algorithms.md.

  ppo          -min(r·A, clip(r, 1-ε_low, 1+ε_high)·A); `dual_clip=c` caps the
               loss of A<0 tokens at -c·A (DAPO / clip-higher are ppo options)
  gspo         sequence ratio s_i = exp(mean_t log r_{i,t}), clipped like ppo
  gspo_token   s_{i,t} = sg(s_i)·π_θ(y_t)/sg(π_θ(y_t)): GSPO's value and
               gradient with token-level advantages allowed
  nsr          ppo, but tokens slightly past the clip bound (within `delta`)
               keep the unclipped gradient with probability `keep_prob`
               (`mode="stochastic"`, needs `rng`), or get it scaled by
               `keep_prob` (`mode="decay"`, the deterministic ablation)
  cispo        -sg(clip(r, 1-ε_low, 1+ε_high))·A·log π_θ: every token keeps a
               gradient, only its weight is truncated
  bapo         ppo with explicit bounds clip(r, c_low, c_high) chosen per
               minibatch so positive-advantage tokens carry a target share of
               the loss (rl.algorithms.bapo), dual clip c = 3

Aggregation (`agg`), with M the mask and |y_i| = sum_t M_{i,t}:
  token_mean               sum_{i,t} L·M / sum M
  seq_mean_token_mean      mean_i (sum_t L·M / |y_i|)
  seq_mean_token_sum       mean_i sum_t L·M
  seq_mean_token_sum_norm  mean_i sum_t L·M / norm_length   (Dr.GRPO constant,
                           default T)
The means run over sequences with at least one token; `agg_norm` replaces
the denominator (sum M, or the sequence count) when gradients are
accumulated over micro-batches and the global count is known.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import chex
import jax
import jax.numpy as jnp

from rl.algorithms import bapo as bapo_lib
from rl.algorithms import kl as kl_lib
from rl.algorithms import off_policy as off_policy_lib
from rl.algorithms import ops, reweighting
from rl.registry import Registry, check_kwargs

# log-ratios are clamped before exp so no ratio is inf (verl does the same).
LOG_RATIO_CLAMP = 20.0
AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum",
                "seq_mean_token_sum_norm")
# indicator map returned by a loss -> the metric of its masked mean
INDICATORS = {"clip_low": "clip_frac_low", "clip_high": "clip_frac_high",
              "clip_dual": "clip_frac_dual", "nsr_band": "nsr_band_frac",
              "nsr_rescued": "nsr_rescued_frac"}


PROXIMAL = ("given", "interpolate")  # where compute's π_old comes from (`proximal`)


@dataclasses.dataclass(frozen=True)
class PolicyLoss:
    """fn(logp, old_logp, adv, mask, rng, **options) -> (loss [N,T], indicators): the
    indicator maps [N, T] of `INDICATORS`, plus any scalar metrics [] of the loss's own.
    `check(**options)`, if given, raises ValueError for bad option values (start-up)."""

    fn: Callable[..., tuple[jax.Array, Mapping[str, jax.Array]]]
    default_agg: str = "token_mean"
    check: Callable[..., None] | None = None


LOSSES: Registry[PolicyLoss] = Registry("policy loss")


def register(*names: str, default_agg: str = "token_mean",
             check: Callable[..., None] | None = None):
    def add(fn):
        LOSSES.register(*names)(PolicyLoss(fn, default_agg, check))
        return fn

    return add


def names() -> list[str]:
    return LOSSES.names()


def aggregate(x: jax.Array, mask: jax.Array, mode: str, *, agg_norm=None,
              norm_length: float | None = None) -> jax.Array:
    """Scalar aggregate of per-token `x` [N, T] over `mask` [N, T] (see module doc)."""
    token_sum = ops.masked_sum(x, mask, axis=1)
    length = jnp.sum(mask, axis=1)
    num_seqs = jnp.sum(length > 0)
    if mode == "token_mean":
        denominator = jnp.sum(length)
        total = jnp.sum(token_sum)
    elif mode == "seq_mean_token_mean":
        denominator = num_seqs
        total = jnp.sum(token_sum / jnp.maximum(length, 1))
    elif mode == "seq_mean_token_sum":
        denominator = num_seqs
        total = jnp.sum(token_sum)
    elif mode == "seq_mean_token_sum_norm":
        denominator = num_seqs
        total = jnp.sum(token_sum) / (mask.shape[1] if norm_length is None else norm_length)
    else:
        raise ValueError(f"unknown aggregation {mode!r} (choose from {', '.join(AGGREGATIONS)})")
    if agg_norm is not None:  # a global count from the caller, used as given
        return total / agg_norm
    return total / jnp.maximum(denominator, 1)


def _clipped_surrogate(ratio, adv, low, high, dual_clip):
    """PPO clipped loss per token, clip(r, low, high), and its clip indicators."""
    loss = -jnp.minimum(ratio * adv, jnp.clip(ratio, low, high) * adv)
    clip_low = (adv < 0) & (ratio < low)
    clip_high = (adv > 0) & (ratio > high)
    clip_dual = jnp.zeros_like(clip_low)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        clip_dual = (adv < 0) & (ratio > dual_clip)
        loss = jnp.where(adv < 0, jnp.minimum(loss, -dual_clip * adv), loss)
    return loss, {"clip_low": clip_low, "clip_high": clip_high, "clip_dual": clip_dual}


def _log_ratio(logp, old_logp):
    return jnp.clip(logp - old_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


@register("ppo")
def ppo(logp, old_logp, adv, mask, rng, *, eps_low: float = 0.2, eps_high: float = 0.2,
        dual_clip: float | None = None):
    """Token-ratio clipped surrogate (GRPO). DAPO: eps_high=0.28, dual_clip=10."""
    ratio = jnp.exp(_log_ratio(logp, old_logp))
    return _clipped_surrogate(ratio, adv, 1.0 - eps_low, 1.0 + eps_high, dual_clip)


def _sequence_log_ratio(logp, old_logp, mask):
    """[N, 1] mean over the response of log r (0 for an empty response)."""
    return ops.masked_mean(_log_ratio(logp, old_logp), mask, axis=1)[:, None]


@register("gspo", default_agg="seq_mean_token_mean")
def gspo(logp, old_logp, adv, mask, rng, *, eps_low: float = 3e-4, eps_high: float = 4e-4):
    """Sequence-level ratio broadcast over the tokens of each response."""
    ratio = jnp.broadcast_to(jnp.exp(_sequence_log_ratio(logp, old_logp, mask)), mask.shape)
    return _clipped_surrogate(ratio, adv, 1.0 - eps_low, 1.0 + eps_high, None)


@register("gspo_token", default_agg="seq_mean_token_mean")
def gspo_token(logp, old_logp, adv, mask, rng, *, eps_low: float = 3e-4,
               eps_high: float = 4e-4):
    """Value s_i at every token, gradient through each token's own log-prob."""
    seq = jax.lax.stop_gradient(jnp.exp(_sequence_log_ratio(logp, old_logp, mask)))
    ratio = seq * jnp.exp(logp - jax.lax.stop_gradient(logp))
    return _clipped_surrogate(ratio, adv, 1.0 - eps_low, 1.0 + eps_high, None)


@register("nsr")
def nsr(logp, old_logp, adv, mask, rng, *, eps_low: float = 0.2, eps_high: float = 0.28,
        delta_low: float = 0.1, delta_high: float = 0.1, keep_prob: float = 0.5,
        mode: str = "stochastic", dual_clip: float | None = None):
    """Near-boundary stochastic rescue on top of the ppo surrogate.

    Band: A>0 and 1+ε_high < r <= 1+ε_high+δ_high, or A<0 and
    1-ε_low-δ_low <= r < 1-ε_low. There the loss is the unclipped -r·A with
    probability `keep_prob` (stochastic) or keep_prob·(-r·A) + (1-keep_prob)·clipped
    (decay: the expected value, gradient scaled by keep_prob). Deeper
    violations stay clipped.
    """
    if not 0.0 <= keep_prob <= 1.0:
        raise ValueError(f"keep_prob must be in [0, 1], got {keep_prob}")
    ratio = jnp.exp(_log_ratio(logp, old_logp))
    loss, ind = _clipped_surrogate(ratio, adv, 1.0 - eps_low, 1.0 + eps_high, dual_clip)
    band = (((adv > 0) & (ratio > 1.0 + eps_high) & (ratio <= 1.0 + eps_high + delta_high))
            | ((adv < 0) & (ratio < 1.0 - eps_low) & (ratio >= 1.0 - eps_low - delta_low)))
    unclipped = -ratio * adv
    if mode == "stochastic":
        if rng is None:
            raise ValueError("nsr mode='stochastic' needs an rng key (or use mode='decay')")
        keep = jax.random.bernoulli(rng, keep_prob, mask.shape)
        rescued = band & keep
        loss = jnp.where(rescued, unclipped, loss)
        rescued = rescued.astype(loss.dtype)
    elif mode == "decay":
        loss = jnp.where(band, keep_prob * unclipped + (1.0 - keep_prob) * loss, loss)
        rescued = band * keep_prob
    else:
        raise ValueError(f"nsr mode must be 'stochastic' or 'decay', got {mode!r}")
    return loss, {**ind, "nsr_band": band, "nsr_rescued": rescued}


@register("cispo")
def cispo(logp, old_logp, adv, mask, rng, *, eps_low: float | None = None,
          eps_high: float = 0.28):
    """Detached clipped IS weight times A·log π_θ (no lower bound by default).

    Written as -w·A·(1 + logp - sg(logp)) so the value is -w·A and the
    gradient is -w·A·∇log π_θ.
    """
    ratio = jnp.exp(_log_ratio(logp, old_logp))
    low = 0.0 if eps_low is None else 1.0 - eps_low
    weight = jax.lax.stop_gradient(jnp.clip(ratio, low, 1.0 + eps_high))
    loss = -weight * adv * (1.0 + logp - jax.lax.stop_gradient(logp))
    return loss, {"clip_low": ratio < low, "clip_high": ratio > 1.0 + eps_high,
                  "clip_dual": jnp.zeros(mask.shape, bool)}


@register("bapo", check=bapo_lib.check_options)
def bapo(logp, old_logp, adv, mask, rng, *, target: float = 0.4, low_start: float = 0.6,
         low_max: float = 0.9, low_step: float = 0.02, high_start: float = 1.2,
         high_max: float = 3.0, high_step: float = 0.05, dual_clip: float | None = 3.0,
         order: str = "low_first", measure: str = "code"):
    """ppo's surrogate with clip(r, c_low, c_high); the bounds come from BAPO's search
    (rl.algorithms.bapo.search) on this minibatch's detached ratios. Defaults: the
    paper's §5.1 constants; dual_clip 3 and the low-first order and measure of the
    authors' code. Also returns bapo_c_low, bapo_c_high, bapo_pos_share."""
    options = dict(target=target, low_start=low_start, low_max=low_max, low_step=low_step,
                   high_start=high_start, high_max=high_max, high_step=high_step,
                   dual_clip=dual_clip, order=order, measure=measure)
    bapo_lib.check_options(**options)
    ratio = jnp.exp(_log_ratio(logp, old_logp))
    c_low, c_high, share = bapo_lib.search(
        ratio, adv, mask, jnp.exp(old_logp) if measure == "paper" else None, target=target,
        lows=bapo_lib.candidates(low_start, low_max, low_step),
        highs=bapo_lib.candidates(high_start, high_max, high_step), order=order)
    loss, ind = _clipped_surrogate(ratio, adv, c_low, c_high, dual_clip)
    return loss, {**ind, "bapo_c_low": c_low, "bapo_c_high": c_high, "bapo_pos_share": share}


def compute(name: str, logp, old_logp, adv, mask, rng=None, *,
            agg: str | None = None, agg_norm=None, norm_length: float | None = None,
            behavior_logp=None, off_policy: off_policy_lib.Correction | None = None,
            proximal: str = "given", versions=None, version=None,
            reweight: str | None = None, reweight_options: Mapping | None = None,
            ref_logp=None, kl_coef: float = 0.0, kl_kind: str = "k3",
            kl_clamp: float | None = None, entropy=None, entropy_coef: float = 0.0,
            **options) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Scalar loss to minimise and a dict of scalar metrics.

    Args:
      name: a registered loss (`names()`).
      logp: [N, T] log π_θ of the sampled tokens (differentiated).
      old_logp: [N, T] log π_old, the proximal policy that makes the ratios
        π_θ/π_old (ignored, may be None, with `proximal="interpolate"`).
      adv: [N] or [N, T] advantages.
      mask: [N, T] response-token mask.
      rng: PRNG key, needed by `nsr` in stochastic mode.
      agg, agg_norm, norm_length: aggregation (module docstring); `agg=None`
        uses the loss's default (token_mean; seq_mean_token_mean for gspo).
      behavior_logp: [N, T] log π_behav, the sampler's log-probs. When given, the
        `off_policy` correction (rl.algorithms.off_policy; None = off) weights or
        masks each token by π_old/π_behav, and the off-policy metrics are added
        (is_weight_mean/_p50/_p90/_p99/_max, corrected_frac, kl_behavior_current,
        kl_behavior_current_k3).
      proximal: "given" (π_old is `old_logp`) or "interpolate": π_old is
        `off_policy.interpolate_proximal(behavior_logp, logp, versions, version)`,
        which needs versions [N, T] int32 (the policy version that sampled each
        token, -1 = padding) and version [] int32 (the learner's update count).
      reweight: "fipo" to apply the future-KL weight inside the loss, with
        `reweight_options` (gamma, clip_low, clip_high, high_only, neg_ratio_cap,
        ratio_mask); adds the metrics fipo_weight_mean, fipo_weight_changed_frac
        (tokens whose weight is not 1), fipo_future_kl_mean, fipo_ratio_masked_frac.
      ref_logp, kl_coef, kl_kind, kl_clamp: adds kl_coef·agg(KL estimate).
      entropy, entropy_coef: [N, T] token entropies; subtracts entropy_coef·agg(H).
      **options: the loss's own options (e.g. eps_low, eps_high, dual_clip).
    """
    policy_loss = LOSSES.get(name)
    check_kwargs("policy loss", name, policy_loss.fn, options)
    logp = ops.as_float(logp)
    mask = jnp.asarray(mask).astype(bool)
    chex.assert_rank(logp, 2)
    old_logp, is_weight, mask, metrics = _proximal_and_correction(
        logp, old_logp, mask, behavior_logp, off_policy, proximal, versions, version)
    adv = ops.as_float(adv)
    if adv.ndim == 1:
        adv = adv[:, None]
    chex.assert_equal_shape_prefix([adv, mask], 1)
    adv = jnp.broadcast_to(adv, mask.shape)
    if reweight is not None:
        adv, fipo_metrics = _fipo(reweight, reweight_options, adv, mask, logp, old_logp)
        metrics.update(fipo_metrics)
    adv = jax.lax.stop_gradient(jnp.where(mask, adv, 0.0))
    agg = policy_loss.default_agg if agg is None else agg

    token_loss, indicators = policy_loss.fn(logp, old_logp, adv, mask, rng, **options)
    token_loss = jnp.where(mask, token_loss * is_weight, 0.0)

    def agg_fn(x):
        return aggregate(x, mask, agg, agg_norm=agg_norm, norm_length=norm_length)

    pg_loss = agg_fn(token_loss)
    loss = pg_loss
    if ref_logp is not None:
        kl = kl_lib.estimate(kl_kind, logp, ref_logp, clamp=kl_clamp)
        kl_value = agg_fn(kl)
        loss = loss + kl_coef * kl_value
        metrics["kl"] = kl_value
    elif kl_coef:
        raise ValueError("kl_coef is set but ref_logp was not given")
    if entropy is not None:
        chex.assert_equal_shape([entropy, mask])
        entropy_value = agg_fn(ops.as_float(entropy))
        loss = loss - entropy_coef * entropy_value
        metrics["entropy"] = entropy_value
    elif entropy_coef:
        raise ValueError("entropy_coef is set but entropy was not given")
    metrics.update(loss=loss, pg_loss=pg_loss, **_ratio_metrics(logp, old_logp, mask))
    metrics.update(_indicator_metrics(indicators, mask))
    return loss, jax.tree.map(jax.lax.stop_gradient, metrics)


def _proximal_and_correction(logp, old_logp, mask, behavior_logp, off_policy, proximal,
                             versions, version):
    """(log π_old [N, T], behaviour weight [N, T], loss mask [N, T], metrics): the
    proximal log-probs, given or interpolated, and `off_policy` applied against
    `behavior_logp` (weight 1 and the mask unchanged without it)."""
    if proximal not in PROXIMAL:
        raise ValueError(f"proximal must be one of {', '.join(PROXIMAL)}, got {proximal!r}")
    if proximal == "interpolate":
        if behavior_logp is None or versions is None or version is None:
            raise ValueError("proximal='interpolate' needs behavior_logp, versions and version")
        old_logp = off_policy_lib.interpolate_proximal(behavior_logp, logp, versions, version)
    old_logp = ops.as_float(old_logp)
    chex.assert_equal_shape([logp, old_logp, mask])
    if behavior_logp is None:
        return old_logp, jnp.ones(mask.shape, logp.dtype), mask, {}
    behavior_logp = ops.as_float(behavior_logp)
    weight, kept, metrics = off_policy_lib.apply(
        off_policy or off_policy_lib.Correction(), old_logp, behavior_logp, logp, mask)
    return old_logp, weight, kept, metrics


def _indicator_metrics(indicators: Mapping[str, jax.Array], mask) -> dict[str, jax.Array]:
    """The masked mean of each `INDICATORS` map (0 when absent) and the loss's own
    scalar metrics as they are."""
    out = {metric: ops.masked_mean(indicators.get(key, jnp.zeros(mask.shape)), mask)
           for key, metric in INDICATORS.items()}
    for key, value in indicators.items():
        if key not in INDICATORS:
            if jnp.ndim(value) != 0:
                raise ValueError(f"loss output {key!r} is neither an indicator map "
                                 f"({', '.join(INDICATORS)}) nor a scalar metric")
            out[key] = value
    return out


def _fipo(reweight: str, options: Mapping | None, adv, mask, logp, old_logp):
    """(adv [N, T] times FIPO's future-KL weight, the fipo_* metrics)."""
    if reweight != "fipo":
        raise ValueError(f"reweight {reweight!r} does not depend on π_θ: apply it to the "
                         "advantages with rl.algorithms.advantages.reweight before the loss")
    weight, future_kl, masked = reweighting.fipo_terms(
        adv, mask, logp, old_logp, **reweighting.fipo_options(**dict(options or {})))
    return adv * weight, {"fipo_weight_mean": ops.masked_mean(weight, mask),
                          "fipo_weight_changed_frac": ops.masked_mean(weight != 1.0, mask),
                          "fipo_future_kl_mean": ops.masked_mean(future_kl, mask),
                          "fipo_ratio_masked_frac": ops.masked_mean(masked, mask)}


def _ratio_metrics(logp, old_logp, mask) -> dict[str, jax.Array]:
    """π_θ/π_old over the response tokens: mean, min, max, and the k3 estimate of
    KL(π_old‖π_θ) (approx_kl)."""
    log_ratio = jax.lax.stop_gradient(_log_ratio(logp, old_logp))
    ratio = jnp.exp(log_ratio)
    ratio_min, ratio_max = ops.masked_min_max(ratio, mask)
    return {"ratio_mean": ops.masked_mean(ratio, mask), "ratio_min": ratio_min,
            "ratio_max": ratio_max,
            "approx_kl": ops.masked_mean(jnp.expm1(-log_ratio) + log_ratio, mask)}
