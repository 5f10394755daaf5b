"""Held-out evaluation: greedy accuracy and unbiased pass@k.

    metrics = evaluate(run, params, rng)   # {"heldout/accuracy": ..., "heldout/pass@4": ...}

A completion is correct when the score of the run's correctness verifier
(`rl.reward.correct`) is >= 1 (verifiers give 1.0 for a correct answer and at
most `format_score` otherwise). `accuracy` is
greedy decoding (temperature 0), the number a reader compares across
checkpoints; `pass@k` uses `eval.n` samples per prompt at `eval.temperature`
and the unbiased estimator of Chen et al. (2021),
1 - C(n-c, k) / C(n, k) averaged over prompts. A chunk's completions are
scored by the reward's worker pool while the next chunk is generated.
"""

from __future__ import annotations

from math import comb

import jax
import numpy as np

import sampling
from rl.train import multiturn
from rl.train.build import Run
from rl.train.scoring import submit_rollouts


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k of the n samples (c correct) is correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def _generate(run: Run, params, prompts, n, sp, rng):
    if run.env is not None:  # multi-turn episodes with the run's tools
        return multiturn.generate(run, params, prompts, n, sp, rng)
    s = run.cfg.sampling
    return sampling.generate(run.model_config, params, prompts, n, sp, rng,
                             page_size=s.page_size, segment_len=s.segment_len,
                             sharding=run.act)


def evaluate(run: Run, params, rng: jax.Array, *, size: int | None = None) -> dict[str, float]:
    """Held-out metrics of `params` on the first `size` (default eval.size) prompts."""
    source = run.heldout_source
    if source is None:
        return {}
    ev = run.cfg.eval
    size = min(size or ev.size, len(source))
    examples = [source[i] for i in range(size)]
    prompts = [run.encode_prompt(ex.prompt) for ex in examples]
    refs = [ex.reference for ex in examples]
    max_new = run.completion_len
    greedy = sampling.SamplingParams(temperature=0.0, max_new_tokens=max_new)
    sampled = sampling.SamplingParams(temperature=ev.temperature, max_new_tokens=max_new)
    lengths, pending = [], []  # (kind, PendingRewards), scored while the next chunk runs
    for start in range(0, size, ev.batch_prompts):
        chunk = slice(start, start + ev.batch_prompts)
        rng, k_greedy, k_sampled = jax.random.split(rng, 3)
        out = _generate(run, params, prompts[chunk], 1, greedy, k_greedy)
        pending.append(("greedy", submit_rollouts(run, out, refs[chunk])))
        lengths.extend(out.lengths.tolist())
        if ev.n and ev.temperature > 0:
            out = _generate(run, params, prompts[chunk], ev.n, sampled, k_sampled)
            pending.append(("sampled", submit_rollouts(run, out, refs[chunk])))
    correct, passes, sample_scores, timeouts = [], {k: [] for k in run.eval_ks}, [], 0
    for kind, job in pending:
        result = job.result()
        timeouts += result.timeouts
        if kind == "greedy":
            correct.extend(result.correct)
            continue
        sample_scores.append(result.total)
        for row in result.correct.reshape(-1, ev.n):
            for k in run.eval_ks:
                passes[k].append(pass_at_k(ev.n, int(row.sum()), k))
    metrics = {"heldout/accuracy": float(np.mean(correct)),
               "heldout/response_length": float(np.mean(lengths)),
               "heldout/reward_timeouts": timeouts}
    if sample_scores:
        metrics["heldout/sample_reward"] = float(np.mean(np.concatenate(sample_scores)))
        metrics.update({f"heldout/pass@{k}": float(np.mean(v)) for k, v in passes.items()})
    return metrics
