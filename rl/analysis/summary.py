"""Summaries of per-token two-model statistics (NumPy, host side).

    mask = completion_mask(prompt_lens, lengths, width)      # [B, T] scored positions
    tokens = flatten(stats, mask)                            # name -> [n] valid positions
    report = summarize(tokens, normalised_position(mask)[mask])

`stats` is `rl.analysis.score_pair`'s output with a = base, b = the other model
(RL or SFT). The summary answers: how sparse is the change (share of
positions whose JS exceeds each threshold), where in the response it sits
(per normalised-position bin), and where the other model moved probability
mass relative to the base's own preferences (onto the base's argmax, within
its top-k, outside it).
"""

from __future__ import annotations

import numpy as np

JS_THRESHOLDS = (0.01, 0.1)
DELTA_THRESHOLDS = (0.1, 0.5, 1.0)
POSITION_BINS = 10


def completion_mask(prompt_lens, lengths, width: int) -> np.ndarray:
    """[B, width] bool: the completion tokens of rows laid out as prompt + completion
    (row b's completion occupies [prompt_lens[b], prompt_lens[b] + lengths[b]))."""
    t = np.arange(width)[None]
    start = np.asarray(prompt_lens)[:, None]
    return (t >= start) & (t < start + np.asarray(lengths)[:, None])


def normalised_position(mask: np.ndarray) -> np.ndarray:
    """[B, T] float: j / n for the j-th of a row's n masked positions (0 elsewhere),
    so every response spans [0, 1) whatever its length."""
    index = np.cumsum(mask, axis=1) - 1
    count = np.maximum(mask.sum(axis=1, keepdims=True), 1)
    return np.where(mask, index / count, 0.0)


def flatten(stats: dict, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Each [B, T] statistic's values at the masked positions, as float64 [n]."""
    return {name: np.asarray(value, np.float64)[mask] for name, value in stats.items()}


def sparsity(js: np.ndarray, thresholds=JS_THRESHOLDS) -> dict[str, float]:
    """Share of positions whose JS divergence exceeds each threshold."""
    return {str(t): float(np.mean(js > t)) if js.size else 0.0 for t in thresholds}


def positional(js: np.ndarray, delta: np.ndarray, position: np.ndarray,
               thresholds=JS_THRESHOLDS, bins: int = POSITION_BINS) -> dict:
    """Per normalised-position bin: the share of its positions above each JS
    threshold, the mean JS, the mean |Δlog p| and the count of positions."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(position, edges[1:-1]), 0, bins - 1)

    def per_bin(values):
        return [float(values[which == i].mean()) if np.any(which == i) else 0.0
                for i in range(bins)]

    return {"edges": edges.tolist(),
            "high_fraction": {str(t): per_bin((js > t).astype(float)) for t in thresholds},
            "mean_js": per_bin(js), "mean_abs_delta": per_bin(np.abs(delta)),
            "count": [int(np.sum(which == i)) for i in range(bins)]}


def reallocation(tokens: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean change in probability mass (other model − base) on the base's argmax
    token, on the base's top-k set, and outside that set (= −top-k: mass is conserved)."""
    top1 = float(np.mean(tokens["b_on_a_top1"] - tokens["a_top1"]))
    topk = float(np.mean(tokens["b_on_a_topk"] - tokens["a_topk"]))
    return {"top1": top1, "topk": topk, "outside": -topk}


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x)) if x.size else 0.0


def summarize(tokens: dict[str, np.ndarray], position: np.ndarray) -> dict:
    """The JSON-able summary of one model pair over the valid positions."""
    delta, js = tokens["delta_logp"], tokens["js"]
    return {
        "positions": int(delta.size),
        "js_above": sparsity(js),
        "js_mean": _mean(js),
        "delta_logp": {"mean": _mean(delta), "mean_abs": _mean(np.abs(delta)),
                       "abs_above": {str(t): _mean(np.abs(delta) > t)
                                     for t in DELTA_THRESHOLDS},
                       "below_-0.3": _mean(delta <= -0.3)},
        "entropy": {"base": _mean(tokens["entropy_a"]), "other": _mean(tokens["entropy_b"])},
        "kl": {"base_other": _mean(tokens["kl_ab"]), "other_base": _mean(tokens["kl_ba"])},
        "topk_overlap": _mean(tokens["topk_overlap"]),
        "realised_is_top1": {"base": _mean(tokens["rank_a"] == 0),
                             "other": _mean(tokens["rank_b"] == 0)},
        "positional": positional(js, delta, position),
        "reallocation": reallocation(tokens),
    }
