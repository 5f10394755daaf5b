"""The tree sampler's host-side rules, as the TreePO authors' rollout applies them.

Source: multimodal-art-projection/TreePO, verl/workers/rollout/vllm_rollout/
vllm_rollout_spmd.py (`generate_sequences_tree_deepth_first_vanilla_mode`,
run by recipe/treepo/run_treepo_train.sh) and recipe/treepo/vllm_rollout_tree.py.

* `segment_finish`: why a freshly decoded segment ends its path (repetition,
  stop token, a text rule such as a complete `\\boxed{...}`, depth limit), and
  how many of its tokens to keep.
* `branch_total` + `allocate`: the children handed out to a prompt's
  continuing nodes ("by_fixed_div" budget with transfer, then "fixed_avg" or
  the log-likelihood-weighted largest-remainder split).
* `fallback_plan`: which finished leaves are cut back and re-expanded when a
  prompt has no continuing node but budget left.

Pure NumPy/Python on host values, so each rule is tested on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Decode = Callable[[list[int]], str]
StopText = Callable[[str], bool]  # a path's text -> it holds a complete answer


def token_repetition(tokens: np.ndarray, n: int, count: int) -> bool:
    """Some n-gram of `tokens` occurs at least `count` times (n <= 0: never)."""
    if n <= 0 or count <= 0 or len(tokens) < n + count - 1:
        return False
    grams = np.lib.stride_tricks.sliding_window_view(np.asarray(tokens), n)
    _, counts = np.unique(grams, axis=0, return_counts=True)
    return bool(counts.max() >= count)


def char_repetition(text: str, length: int = 32, count: int = 8) -> bool:
    """Some `length`-character substring occurs at least `count` times (overlaps
    included): the authors' `_has_repetition` (length 32, count 8)."""
    if length <= 0 or count <= 0 or len(text) < length:
        return False
    seen: dict[str, int] = {}
    for i in range(len(text) - length + 1):
        key = text[i:i + length]
        seen[key] = seen.get(key, 0) + 1
        if seen[key] >= count:
            return True
    return False


def text_cut(decode: Decode, before: np.ndarray, segment: np.ndarray,
             stop_text: StopText) -> int | None:
    """Tokens of `segment` to keep: the shortest prefix whose text, after the path's
    earlier tokens `before`, satisfies `stop_text` (e.g. holds a complete box); None if
    even the whole segment does not. Binary search: O(log len(segment)) decodes (the
    rule must stay true once true, as a closed box does)."""
    prefix = [int(t) for t in before]
    tokens = [int(t) for t in segment]
    if not tokens or not stop_text(decode(prefix + tokens)):
        return None
    lo, hi = 1, len(tokens)  # true at hi; find the smallest such
    while lo < hi:
        mid = (lo + hi) // 2
        if stop_text(decode(prefix + tokens[:mid])):
            hi = mid
        else:
            lo = mid + 1
    return hi


def segment_finish(segment: np.ndarray, before: np.ndarray, stopped: bool, depth: int,
                   tree, decode: Decode | None,
                   stop_text: StopText | None = None) -> tuple[str, int]:
    """(finish reason, tokens of `segment` to keep) for a node after its round.

    In the authors' order for their training run (repetition_es_policy=
    "most_prioritized"): "repetition" when the segment repeats itself (with
    `decode`: a `tree.repetition_chars`-character substring of the segment's
    text `tree.repetition_count` times; without: a token `tree.repetition_ngram`-
    gram that often); "stop" when it ended on a stop token (kept whole, the stop
    token included); "stop" when `decode` and `stop_text` are given and the
    path's text (earlier segments + this one) satisfies `stop_text` (TreePO: holds
    a complete box): the segment is cut right after the token that completes it;
    "length" at
    `tree.max_depth`; "" (the node continues) otherwise.
    """
    n = len(segment)
    if decode is not None:
        repeated = char_repetition(decode([int(t) for t in segment]), tree.repetition_chars,
                                   tree.repetition_count)
    else:
        repeated = token_repetition(segment, tree.repetition_ngram, tree.repetition_count)
    if repeated:
        return "repetition", n
    if stopped:
        return "stop", n
    if stop_text is not None and decode is not None:
        cut = text_cut(decode, before, segment, stop_text)
        if cut is not None:
            return "stop", cut
    if depth >= tree.max_depth:
        return "length", n
    return "", n


def branch_total(remaining: int, continuing: int, finished_now: int, divergence: int) -> int:
    """Children for a prompt's `continuing` nodes this round ("by_fixed_div"):

        min(remaining, divergence · (continuing + finished_now)), at least `continuing`

    `remaining` = leaves still wanted (leaves_per_prompt - leaves so far); every
    node that finished this round hands its `divergence` children to the others.
    """
    return max(min(remaining, divergence * (continuing + finished_now)), continuing)


def fixed_avg(total: int, k: int) -> list[int]:
    """The authors' "fixed_avg" split: total // k each, the remainder to the last
    node, at least 1 each."""
    avg, rest = divmod(total, k)
    counts = [max(1, avg)] * k
    counts[-1] = max(1, avg + rest)
    return counts


def largest_remainder(weights: np.ndarray, total: int) -> list[int]:
    """The authors' `weight_to_discrete_allocate`: 1 each, the other total - k in
    proportion to `weights` by the largest-remainder method."""
    w = np.asarray(weights, np.float64)
    k = len(w)
    alloc = np.ones(k, np.int64)
    rest = total - k
    if rest <= 0:
        return alloc.tolist()
    raw = w / w.sum() * rest
    base = np.floor(raw).astype(np.int64)
    left = rest - int(base.sum())
    if left:
        base[np.argsort(-(raw - base), kind="stable")[:left]] += 1
    return (alloc + base).tolist()


def allocate(total: int, k: int, policy: str = "uniform", path_logp: np.ndarray | None = None,
             temperature: float = 1.0) -> list[int]:
    """Children per continuing node (k of them), summing to `total` (>= k, each >= 1).

    uniform: `fixed_avg`. low_likelihood / high_likelihood: softmax of
    ∓(Σ log p - min) / temperature over the nodes' path log-probs `path_logp` [k]
    (the authors' logprob_weighted_div / inverse_logprob_weighted_div), split by
    `largest_remainder`.
    """
    if policy == "uniform":
        return fixed_avg(total, k)
    logp = np.asarray(path_logp, np.float64)
    shifted = logp - logp.min()
    score = (-shifted if policy == "low_likelihood" else shifted) / temperature
    weights = np.exp(score - score.max())
    return largest_remainder(weights, total)


def fallback_plan(finishes: Sequence[str], depths: Sequence[int], budget: int,
                  divergence: int, rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """[(leaf index, segments kept, children)] to re-expand a prompt with no
    continuing node ("soft_boxed_and_eos" pool, "random" cut).

    The pool is the leaves that finished properly (finish "stop": a stop token
    or a complete box), shuffled; each in turn is cut back to a uniform number of
    its segments in [0, depth - 1] and gets min(divergence, budget left)
    children, until the budget is spent. With no such leaf the prompt restarts
    from scratch: [(-1, 0, min(divergence, budget))] (the authors' behaviour;
    truncated and repeating leaves are never re-expanded).
    """
    pool = [j for j, finish in enumerate(finishes) if finish == "stop"]
    if not pool:
        return [(-1, 0, min(divergence, budget))] if budget > 0 else []
    rng.shuffle(pool)
    plan = []
    for j in pool:
        if budget <= 0:
            break
        take = min(divergence, budget)
        plan.append((j, int(rng.integers(0, depths[j])), take))
        budget -= take
    return plan
