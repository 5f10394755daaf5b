"""APRIL, active partial rollouts: the host-side bookkeeping (pure Python and NumPy).

Source: Zhou et al. 2025, "APRIL: Active Partial Rollouts in Reinforcement Learning to
Tame Long-tail Generation" (arXiv 2509.18521); authors' code in THUDM/slime
(`--partial-rollout`, `--over-sampling-batch-size`, the rollout buffer) and RLinf.

A step asks for more prompt groups than it trains on (`over_provision`), stops the
sampler as soon as `target` groups have finished (`stop_rule`, the `stop_when` of
`sampling.generate`), and keeps the rest in a `Carry`: groups with unfinished
("partial") rows, and finished surplus groups. Next step each partial row is resumed
as a new prompt (prompt + its tokens so far, n=1, with the budget it has left,
`resume_requests`), its continuation is appended (`join`), and the oldest finished
groups are trained on first (`select`). Every token keeps the log-probs of the
policy that sampled it and that policy's version (the update step), so the
trainer can correct for or mask stale tokens and log the staleness (`staleness`).

Like the authors' code: a finished group leaves the buffer before new prompts,
oldest first (slime pops its buffer from the front); finished surplus groups are
kept, not dropped; a resumed row's budget is max_new_tokens minus its tokens so
far; the over-provisioned request counts the carried groups (slime fills
`over_sampling_batch_size` from the buffer before the data source). Unlike it:
our sampler is synchronous and stops at decode-segment boundaries
(`sampling.segment_len` tokens), not the moment the target is met, so a few
more groups may finish in the last segment (kept as surplus); resumed rows are
decoded in the same call as the fresh ones and are subject to the same stop; a
resumed row is re-prefilled (prompt + partial tokens) under the new policy
rather than keeping the old KV cache; groups are scored only once taken. The
authors' optional loss mask of carried tokens (`--mask-offpolicy-in-partial-rollout`)
is left to the trainer, which has `versions` for it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sampling.rollouts import Rollouts
from sampling.row_kv import RowKV

PARTIAL = "partial"


def over_provision(target_groups: int, ratio: float) -> int:
    """ceil(target_groups * ratio): the prompt groups a step has in flight."""
    if (isinstance(target_groups, bool) or not isinstance(target_groups, numbers.Integral)
            or target_groups < 1):
        raise ValueError(f"target_groups must be an int >= 1, got {target_groups!r}")
    if (isinstance(ratio, bool) or not isinstance(ratio, numbers.Real)
            or not math.isfinite(ratio) or ratio < 1):
        raise ValueError(f"rollout.over_provision must be a finite number >= 1, got {ratio!r}")
    return math.ceil(round(int(target_groups) * float(ratio), 9))  # 10 * 1.1: 11, not 12


def stop_rule(target_groups: int, row_groups: int | np.ndarray, *,
              finished: int = 0) -> Callable[[np.ndarray], bool]:
    """`stop_when(done)` for `sampling.generate`: True once `finished` plus the groups
    whose rows in the call are all done reach `target_groups`.

    row_groups: n (rows prompt-major, n per group) or [R] the group id of each row
    (`row_groups` below: a carried group's resumed rows share its id; its rows
    finished earlier are not in the call). finished: groups complete before the
    call (the carry's finished groups, which have no rows in it).
    """
    def stop_when(done: np.ndarray) -> bool:
        ids = (np.arange(len(done)) // row_groups if isinstance(row_groups, int)
               else np.asarray(row_groups))
        if ids.shape != done.shape:
            raise ValueError(f"row_groups has {ids.shape[0]} rows, done has {done.shape[0]}")
        complete = len(np.unique(ids)) - len(np.unique(ids[~done]))
        return finished + complete >= target_groups
    return stop_when


@dataclasses.dataclass
class Row:
    """One sample of a group: its tokens so far, aligned per-token arrays."""

    tokens: np.ndarray        # [T] int32 generated tokens
    logprobs: np.ndarray      # [T] f32 log-prob under the sampling distribution that drew it
    raw_logprobs: np.ndarray  # [T] f32 log-prob under that policy at temperature 1
    versions: np.ndarray      # [T] int32 policy version (update step) that sampled each token
    finish: str               # "stop" | "length" | "partial"
    # a partial row's kept cache (sampling.row_kv.RowKV of its prompt and tokens), when
    # its sampler kept it (rollout.kv_on_update=keep); None: prefilled again on resume
    kv: Any = None


@dataclasses.dataclass
class Group:
    """A prompt's n rows; `finished` when none is partial."""

    prompt: list[int]
    reference: Any            # opaque (the example's answer); JSON-able for checkpoints
    rows: list[Row]
    born: int                 # version that sampled its first tokens (oldest first)

    @property
    def finished(self) -> bool:
        return all(row.finish != PARTIAL for row in self.rows)


@dataclasses.dataclass
class Carry:
    """The groups a step carries over, oldest first."""

    max_new_tokens: int
    groups: list[Group] = dataclasses.field(default_factory=list)

    @property
    def num_finished(self) -> int:
        return sum(g.finished for g in self.groups)


def _row(rollouts, r: int, version: int) -> Row:
    k = int(rollouts.lengths[r])
    kv = rollouts.kv[r] if getattr(rollouts, "kv", None) is not None else None
    return Row(np.asarray(rollouts.tokens[r, :k], np.int32),
               np.asarray(rollouts.logprobs[r, :k], np.float32),
               np.asarray(rollouts.raw_logprobs[r, :k], np.float32),
               np.full(k, version, np.int32), str(rollouts.finish_reason[r]), kv)


def resume_requests(carry: Carry) -> tuple[list[list[int]], np.ndarray]:
    """(prompts: prompt + tokens so far of each partial row, budgets [K] ints: the
    tokens it has left), carry order: sample them with n=1 and these budgets."""
    prompts, budgets = [], []
    for g in carry.groups:
        for row in g.rows:
            if row.finish == PARTIAL:
                left = carry.max_new_tokens - len(row.tokens)
                if left < 1:
                    raise ValueError(f"a carried partial row has {len(row.tokens)} tokens: "
                                     f"none left of max_new_tokens {carry.max_new_tokens}")
                prompts.append(list(g.prompt) + row.tokens.tolist())
                budgets.append(left)
    return prompts, np.asarray(budgets, np.int64)


def kept_caches(carry: Carry) -> dict:
    """{request index: kept cache} of the partial rows `resume_requests` lists, for those
    whose cache was kept (`sampling.generate`'s `resume`)."""
    partial = [row for g in carry.groups for row in g.rows if row.finish == PARTIAL]
    return {i: row.kv for i, row in enumerate(partial) if row.kv is not None}


def row_groups(carry: Carry, fresh_groups: int, n: int) -> np.ndarray:
    """[K + fresh_groups * n] group id of each row of a call sampling
    `resume_requests(carry)` then `fresh_groups` fresh prompts each repeated n times:
    carried groups are numbered by their index in `carry.groups`, fresh ones after."""
    resumed = [i for i, g in enumerate(carry.groups) for row in g.rows if row.finish == PARTIAL]
    fresh = len(carry.groups) + np.arange(fresh_groups * n) // n
    return np.concatenate([np.asarray(resumed, np.int64), fresh]).astype(np.int64)


def join(carry: Carry, continuation, version: int) -> tuple[list[Group], Carry]:
    """Appends to each partial row its continuation: rows 0..K-1 of `continuation`
    (Rollouts-like: tokens, lengths, logprobs, raw_logprobs, finish_reason; K =
    len(resume_requests(carry)[0])), sampled at `version`. `continuation` None:
    nothing was resumed this step (partial rows stay as they are).

    Returns (the carry's finished groups, oldest first; a Carry of the others).
    The inputs are not modified."""
    r, ready, pending = 0, [], []
    for g in carry.groups:
        rows = []
        for row in g.rows:
            if row.finish == PARTIAL and continuation is not None:
                more = _row(continuation, r, version)
                r += 1
                row = Row(*(np.concatenate([getattr(row, f), getattr(more, f)])
                            for f in ("tokens", "logprobs", "raw_logprobs", "versions")),
                          more.finish, more.kv)
            rows.append(row)
        (ready if all(x.finish != PARTIAL for x in rows) else pending).append(
            Group(g.prompt, g.reference, rows, g.born))
    return ready, Carry(carry.max_new_tokens, pending)


def split_finished(rollouts, prompts: Sequence[list[int]], references: Sequence, n: int,
                   version: int, *, start: int = 0) -> tuple[list[Group], list[Group]]:
    """Groups of fresh prompts sampled at `version`: prompt g owns rows start + g*n ..
    start + g*n + n-1 of `rollouts` (Rollouts-like). Returns (finished, unfinished),
    each in prompt order."""
    finished, unfinished = [], []
    for g, (prompt, ref) in enumerate(zip(prompts, references, strict=True)):
        rows = [_row(rollouts, start + g * n + j, version) for j in range(n)]
        group = Group(list(prompt), ref, rows, version)
        (finished if group.finished else unfinished).append(group)
    return finished, unfinished


def select(ready: list[Group], pending: list[Group], target: int,
           max_new_tokens: int) -> tuple[list[Group], Carry]:
    """(the first `target` groups of `ready` (finished, oldest first: the carry's,
    then fresh ones), the Carry of the surplus and the `pending` unfinished groups,
    ordered by `born`)."""
    if any(not g.finished for g in ready) or any(g.finished for g in pending):
        raise ValueError("select needs finished groups in ready and unfinished in pending")
    keep = sorted(ready[target:] + pending, key=lambda g: g.born)  # stable: ties keep order
    return ready[:target], Carry(max_new_tokens, keep)


def to_rollouts(groups: Sequence[Group], width: int, pad_id: int = 0):
    """(sampling.Rollouts of the groups' rows, prompt-major, prompt_index = group
    index, with their `versions`; versions [R, width] int32, -1 past each length)."""
    rows = [row for g in groups for row in g.rows]
    tokens = np.full((len(rows), width), pad_id, np.int32)
    logp, raw = np.zeros((2, len(rows), width), np.float32)
    versions = np.full((len(rows), width), -1, np.int32)
    for i, row in enumerate(rows):
        k = len(row.tokens)
        if k > width:
            raise ValueError(f"a row has {k} tokens, more than width {width}")
        tokens[i, :k], logp[i, :k], raw[i, :k], versions[i, :k] = (
            row.tokens, row.logprobs, row.raw_logprobs, row.versions)
    index = np.repeat(np.arange(len(groups), dtype=np.int32), [len(g.rows) for g in groups])
    return Rollouts(tokens=tokens, lengths=np.array([len(r.tokens) for r in rows], np.int32),
                    logprobs=logp, raw_logprobs=raw, prompt_index=index,
                    finish_reason=np.array([r.finish for r in rows], dtype="<U7"),
                    versions=versions), versions


def staleness(groups: Sequence[Group], current_version: int) -> dict[str, float]:
    """Staleness (current_version - the version that sampled a token) over the
    groups' tokens: mean, max, the fraction of tokens from an older policy, and
    the groups begun under one."""
    ages = np.concatenate([current_version - row.versions for g in groups for row in g.rows]
                          + [np.zeros(0, np.int64)])
    if np.any(ages < 0):
        raise ValueError(f"a token has a version newer than current_version {current_version}")
    return {"april/staleness_mean": float(ages.mean()) if ages.size else 0.0,
            "april/staleness_max": int(ages.max()) if ages.size else 0,
            "april/carried_token_frac": float(np.mean(ages > 0)) if ages.size else 0.0,
            "april/carried_groups": sum(g.born < current_version for g in groups)}


_FIELDS = ("tokens", "logprobs", "raw_logprobs", "versions")


def state_to_json(carry: Carry) -> dict:
    """The carry as JSON-able lists (float32 log-probs round-trip exactly)."""
    return {"max_new_tokens": carry.max_new_tokens, "groups": [
        {"prompt": [int(t) for t in g.prompt], "reference": g.reference, "born": int(g.born),
         "rows": [{"finish": row.finish, **{f: getattr(row, f).tolist() for f in _FIELDS},
                   **({"kv": _kv_state(row.kv)} if row.kv is not None else {})}
                  for row in g.rows]} for g in carry.groups]}


def _kv_state(kv) -> dict:
    """A kept cache as host arrays (a checkpoint stores them apart from the JSON)."""
    return {"k": np.asarray(kv.k), "v": np.asarray(kv.v), "hidden": np.asarray(kv.hidden)}


def state_from_json(state: dict) -> Carry:
    """Inverse of `state_to_json`."""
    try:
        groups = [Group(list(g["prompt"]), g["reference"], [
            Row(*(np.asarray(row[f], np.float32 if "logprobs" in f else np.int32)
                  for f in _FIELDS), row["finish"],
                RowKV(**{k: np.asarray(a) for k, a in row["kv"].items()}) if "kv" in row
                else None) for row in g["rows"]], int(g["born"]))
            for g in state["groups"]]
        return Carry(int(state["max_new_tokens"]), groups)
    except (KeyError, TypeError) as e:
        raise ValueError(f"not an APRIL carry state ({type(e).__name__}: {e})") from None
