"""Host-side assembly of learner batches from prompts and sampled completions.

Rows are laid out as `prompt + completion + padding` (right-padded), so
every position is its own RoPE position and padding never affects a real
token under the causal mask. Shapes are bucketed so a run compiles few
programs: T = round_up(longest prompt, prompt_multiple) + C, and the row
count is fixed by the caller (padding rows have an all-False mask).
"""

from __future__ import annotations

import dataclasses

import numpy as np


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclasses.dataclass
class Sequences:
    """[rows, ...] arrays: what the learner scores, plus the sampler's log-probs."""

    tokens: np.ndarray        # [rows, T] int32
    prompt_lens: np.ndarray   # [rows] int32
    completion: np.ndarray    # [rows, C] int32
    mask: np.ndarray          # [rows, C] bool
    sampler_logp: np.ndarray  # [rows, C] f32 (0 where masked)
    valid: np.ndarray         # [rows] bool (False = padding row)

    def learner_inputs(self) -> dict[str, np.ndarray]:
        return {"tokens": self.tokens, "prompt_lens": self.prompt_lens,
                "completion": self.completion, "mask": self.mask}


def assemble(prompts: list[list[int]], completions: list[list[int]], *, completion_len: int,
             rows: int, sampler_logp: list[np.ndarray] | None = None,
             prompt_multiple: int = 16) -> Sequences:
    """Pads `len(completions)` <= rows sequences into fixed-shape arrays.

    prompts[i] / completions[i]: token ids of row i (completions longer than
    `completion_len` are an error); sampler_logp[i]: one log-prob per
    completion token.
    """
    n = len(completions)
    if n > rows or len(prompts) != n:
        raise ValueError(f"{n} completions and {len(prompts)} prompts for {rows} rows")
    c = completion_len
    longest = max((len(p) for p in prompts), default=1)
    t = round_up(max(longest, 1), prompt_multiple) + c
    tokens = np.zeros((rows, t), np.int32)
    prompt_lens = np.ones(rows, np.int32)
    completion = np.zeros((rows, c), np.int32)
    mask = np.zeros((rows, c), bool)
    logp = np.zeros((rows, c), np.float32)
    for i, (prompt, comp) in enumerate(zip(prompts, completions)):
        if len(comp) > c:
            raise ValueError(f"completion {i} has {len(comp)} tokens > completion_len {c}")
        p = len(prompt)
        tokens[i, :p] = prompt
        tokens[i, p:p + len(comp)] = comp
        prompt_lens[i] = p
        completion[i, :len(comp)] = comp
        mask[i, :len(comp)] = True
        if sampler_logp is not None:
            logp[i, :len(comp)] = sampler_logp[i][:len(comp)]
    valid = np.arange(rows) < n
    return Sequences(tokens, prompt_lens, completion, mask, logp, valid)
