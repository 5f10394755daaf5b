"""Held-out evaluation: greedy accuracy and unbiased pass@k.

    metrics = evaluate(run, params, rng)   # {"heldout/accuracy": ..., "heldout/pass@4": ...}

A completion is correct when its verifier score is >= 1 (verifiers give 1.0
for a correct answer and at most `format_score` otherwise). `accuracy` is
greedy decoding (temperature 0), the number a reader compares across
checkpoints; `pass@k` uses `eval.n` samples per prompt at `eval.temperature`
and the unbiased estimator of Chen et al. (2021),
1 - C(n-c, k) / C(n, k) averaged over prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import jax
import numpy as np

import sampling
from rl import rewards as rewards_lib
from rl.build import Run

CORRECT = 1.0 - 1e-6


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k of the n samples (c correct) is correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def completion_texts(tokenizer, rollouts) -> list[str]:
    return [tokenizer.decode(rollouts.completion(r)) for r in range(len(rollouts))]


def score_rollouts(run: Run, rollouts, references: Sequence) -> np.ndarray:
    """[R] verifier scores of each rollout row against its prompt's reference."""
    texts = completion_texts(run.tokenizer, rollouts)
    refs = [references[int(i)] for i in rollouts.prompt_index]
    return rewards_lib.score(run.algorithm.reward, texts, refs, **run.algorithm.reward_options)


def _generate(run: Run, params, prompts, n, sp, rng):
    s = run.cfg.sampling
    return sampling.generate(run.model_config, params, prompts, n, sp, rng,
                             page_size=s.page_size, segment_len=s.segment_len)


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
    correct, passes, lengths, sample_scores = [], {k: [] for k in run.eval_ks}, [], []
    for start in range(0, size, ev.batch_prompts):
        chunk = slice(start, start + ev.batch_prompts)
        rng, k_greedy, k_sampled = jax.random.split(rng, 3)
        out = _generate(run, params, prompts[chunk], 1, greedy, k_greedy)
        scores = score_rollouts(run, out, refs[chunk])
        correct.extend(scores >= CORRECT)
        lengths.extend(out.lengths.tolist())
        if ev.n and ev.temperature > 0:
            out = _generate(run, params, prompts[chunk], ev.n, sampled, k_sampled)
            scores = score_rollouts(run, out, refs[chunk]).reshape(-1, ev.n)
            sample_scores.append(scores)
            for row in scores:
                c = int(np.sum(row >= CORRECT))
                for k in run.eval_ks:
                    passes[k].append(pass_at_k(ev.n, c, k))
    metrics = {"heldout/accuracy": float(np.mean(correct)),
               "heldout/response_length": float(np.mean(lengths))}
    if sample_scores:
        metrics["heldout/sample_reward"] = float(np.mean(np.concatenate(sample_scores)))
        metrics.update({f"heldout/pass@{k}": float(np.mean(v)) for k, v in passes.items()})
    return metrics
