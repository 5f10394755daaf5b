"""`Rollouts`: what a sampler returns, as host NumPy arrays.

Row r is one completion (a flat sample or a tree leaf) of prompt
`prompt_index[r]`; `tokens[r, :lengths[r]]` are its generated tokens and the
two log-prob arrays are aligned with them (0 past the length). The learner's
importance ratios use `logprobs` (the sampling distribution) or
`raw_logprobs` (the model at temperature 1).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Rollouts:
    tokens: np.ndarray         # [R, N] int32, pad past lengths
    lengths: np.ndarray        # [R] int32 generated tokens
    logprobs: np.ndarray       # [R, N] fp32 log-prob under the sampling distribution
    raw_logprobs: np.ndarray   # [R, N] fp32 log-prob under the model, temperature 1
    prompt_index: np.ndarray   # [R] int32 index into the prompts passed in
    finish_reason: np.ndarray  # [R] str: "stop" | "length" | "repetition" | "partial" (APRIL)
    paths: np.ndarray | None = None  # [R, D] tree branch ids per depth, -1 padded
    stats: dict = dataclasses.field(default_factory=dict)
    # [R, N] int32 the policy version (update count) that sampled each token, -1 past the
    # length; None: one version for the whole call, which its caller knows
    versions: np.ndarray | None = None
    # `generate(keep_partial=True)`: each row's kept cache (sampling.row_kv.RowKV) when it
    # is unfinished ("partial"), else None
    kv: list | None = None
    # multi-turn (`sampling.turns`): [R, N] bool the policy's tokens (False on the
    # environment's replies, whose log-probs are 0; None: every token is the policy's)
    loss_mask: np.ndarray | None = None
    turns: np.ndarray | None = None  # [R] int32 the policy's turns
    # multi-turn: per row, what its environment recorded (set by the caller that owns the
    # environment, e.g. rl.envs.environment.Record; the sampler never reads it)
    episodes: list | None = None

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def completion(self, r: int) -> list[int]:
        return self.tokens[r, :self.lengths[r]].tolist()

    def group_ids(self) -> np.ndarray:
        """[R] group id per row (the prompt index), for `rl.algorithms.advantages.compute`."""
        return self.prompt_index.copy()
