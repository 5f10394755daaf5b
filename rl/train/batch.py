"""Host-side assembly of learner batches from prompts and sampled completions.

A batch is P prompt groups of G completions each: the distinct prompts
`[P, Tp]` (right-padded, Tp = round_up(longest prompt, prompt_multiple) so
a run compiles few programs) and the completions `[P·G, C]`, group-major.
The learner runs each prompt once for its G completions
(`models.shared_prefix_hidden_states`). The group count is fixed by the
caller; padding groups have a one-token prompt and all-False masks.
"""

from __future__ import annotations

import dataclasses

import numpy as np

PROMPT_MULTIPLE = 16  # prompt slots round up to this: few distinct shapes per run


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@dataclasses.dataclass
class Sequences:
    """What the learner scores, plus the sampler's log-probs."""

    prompts: np.ndarray       # [P, Tp] int32 right-padded
    prompt_lens: np.ndarray   # [P] int32 (1 for padding groups)
    completion: np.ndarray    # [P·G, C] int32
    mask: np.ndarray          # [P·G, C] bool
    sampler_logp: np.ndarray  # [P·G, C] f32 (0 where masked)
    valid: np.ndarray         # [P·G] bool (False = padding row)
    versions: np.ndarray      # [P·G, C] int32 the policy version of each token (-1 masked)

    def learner_inputs(self) -> dict[str, np.ndarray]:
        return {"prompts": self.prompts, "prompt_lens": self.prompt_lens,
                "completion": self.completion, "mask": self.mask}


def assemble(prompts: list[list[int]], completions: list[list[int]], *, group_size: int,
             groups: int, completion_len: int, sampler_logp: list[np.ndarray] | None = None,
             row_valid: list[bool] | None = None, versions: list[np.ndarray] | None = None,
             loss_masks: list[np.ndarray | None] | None = None,
             prompt_multiple: int = PROMPT_MULTIPLE) -> Sequences:
    """Pads `len(prompts)` <= groups prompt groups into fixed-shape arrays.

    prompts[i]: token ids of group i's prompt; completions[i·G + j]: its j-th
    completion (longer than `completion_len` is an error); sampler_logp[r]:
    one log-prob per token of completion r; row_valid[r]: False for a padding row
    inside a group (rl.train.groups.Groups.pad), which is then left out like padding groups;
    versions[r]: the policy version of each token of completion r (default 0);
    loss_masks[r]: which of completion r's tokens are the policy's (a multi-turn episode's
    tool replies are not: `mask` is False there; None: every token).
    """
    g, c = group_size, completion_len
    if len(prompts) > groups or len(completions) != len(prompts) * g:
        raise ValueError(f"{len(prompts)} prompts (at most {groups}) need {len(prompts) * g} "
                         f"completions of {g} per group, got {len(completions)}")
    longest = max((len(p) for p in prompts), default=1)
    tp = round_up(max(longest, 1), prompt_multiple)
    prompt_arr = np.zeros((groups, tp), np.int32)
    prompt_lens = np.ones(groups, np.int32)
    for i, prompt in enumerate(prompts):
        if not prompt:
            raise ValueError(f"prompt {i} is empty")
        prompt_arr[i, :len(prompt)] = prompt
        prompt_lens[i] = len(prompt)
    rows = groups * g
    completion = np.zeros((rows, c), np.int32)
    mask = np.zeros((rows, c), bool)
    logp = np.zeros((rows, c), np.float32)
    token_versions = np.full((rows, c), -1, np.int32)
    for i, comp in enumerate(completions):
        if len(comp) > c:
            raise ValueError(f"completion {i} has {len(comp)} tokens > completion_len {c}")
        completion[i, :len(comp)] = comp
        own = loss_masks[i] if loss_masks is not None else None
        mask[i, :len(comp)] = True if own is None else np.asarray(own, bool)[:len(comp)]
        if sampler_logp is not None:
            logp[i, :len(comp)] = sampler_logp[i][:len(comp)]
        token_versions[i, :len(comp)] = versions[i][:len(comp)] if versions is not None else 0
    valid = np.arange(rows) < len(completions)
    if row_valid is not None:
        valid[:len(completions)] &= np.asarray(row_valid, bool)
    return Sequences(prompt_arr, prompt_lens, completion, mask, logp, valid, token_versions)
