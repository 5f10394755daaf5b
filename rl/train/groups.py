"""The completions a step keeps for its update, and their reward statistics.

    kept = Groups()
    kept.add(prompt, [(rollouts, rows, round_)])    # one prompt's samples, rewards pending
    kept.pad(g)                                     # every group to g rows (DARS)
    finish_rewards(kept, sampled, stats)            # waits for the rewards, fills both

`rl.train.collect.Collector` samples rounds of prompts and submits each round's
completions to the run's reward (`rl.rewards.RewardSpec.submit`); the kept
rows remember (round, row) so their rewards can be filled in once the workers
are done, after the caller has dispatched its device work. A group may take
rows from several rounds (DARS's extra rollouts); padding rows (round -1) have
no tokens, reward 0 and `valid` False.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Groups:
    """The completions kept for one update, grouped by prompt (rows prompt-major)."""

    prompts: list[list[int]] = dataclasses.field(default_factory=list)    # per group
    references: list = dataclasses.field(default_factory=list)  # per group (None: unknown)
    completions: list[list[int]] = dataclasses.field(default_factory=list)
    logp: list[np.ndarray] = dataclasses.field(default_factory=list)
    rewards: list[float] = dataclasses.field(default_factory=list)
    correct: list[bool] = dataclasses.field(default_factory=list)
    group_ids: list[int] = dataclasses.field(default_factory=list)
    paths: list[np.ndarray] = dataclasses.field(default_factory=list)
    truncated: list[bool] = dataclasses.field(default_factory=list)
    rows: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (round, row)
    valid: list[bool] = dataclasses.field(default_factory=list)  # False: padding
    # per row: the policy version (update count) that sampled each token
    versions: list[np.ndarray] = dataclasses.field(default_factory=list)
    # per row: the policy's tokens (False on a multi-turn episode's tool replies) and the
    # episode's rl.envs.environment.Record; None for single-turn rows
    loss_masks: list[np.ndarray | None] = dataclasses.field(default_factory=list)
    episodes: list = dataclasses.field(default_factory=list)

    @property
    def num_groups(self) -> int:
        return len(self.prompts)

    def add(self, prompt: list[int], parts, version: int = 0, reference=None) -> None:
        """Keeps one prompt's samples as a group: `parts` is [(rollouts, rows, round_)],
        the `rows` of the Rollouts sampled in round `round_`, each token sampled by policy
        `version` unless the Rollouts record their own (`Rollouts.versions`)."""
        gid = self.num_groups
        self.prompts.append(prompt)
        self.references.append(reference)
        for rollouts, rows, round_ in parts:
            for r in rows:
                self.completions.append(rollouts.completion(r))
                self.logp.append(rollouts.logprobs[r, :rollouts.lengths[r]])
                self.versions.append(
                    np.full(int(rollouts.lengths[r]), version, np.int32)
                    if rollouts.versions is None
                    else np.asarray(rollouts.versions[r, :rollouts.lengths[r]], np.int32))
                self.loss_masks.append(None if rollouts.loss_mask is None
                                       else rollouts.loss_mask[r, :rollouts.lengths[r]])
                self.episodes.append(None if rollouts.episodes is None
                                     else rollouts.episodes[r])
                self.group_ids.append(gid)
                self.truncated.append(rollouts.finish_reason[r] == "length")
                self.rows.append((round_, int(r)))
                self.valid.append(True)
                if rollouts.paths is not None:
                    self.paths.append(rollouts.paths[r])

    def pad(self, size: int) -> None:
        """Pads every group with empty, invalid rows to `size` rows (the learner's fixed
        group size); a group larger than `size` is an error."""
        counts = np.bincount(np.asarray(self.group_ids, np.int64), minlength=self.num_groups)
        if counts.size and counts.max() > size:
            raise ValueError(f"a group has {counts.max()} rows, more than the group size {size}")
        fields = ("completions", "logp", "group_ids", "truncated", "rows", "valid",
                  "versions", "loss_masks", "episodes")
        old = {name: getattr(self, name) for name in fields}
        for name in fields:
            setattr(self, name, [])
        start = 0
        for gid, count in enumerate(counts):
            for name in fields:
                getattr(self, name).extend(old[name][start:start + count])
            for _ in range(size - count):
                self.completions.append([])
                self.logp.append(np.zeros(0, np.float32))
                self.versions.append(np.zeros(0, np.int32))
                self.loss_masks.append(None)
                self.episodes.append(None)
                self.group_ids.append(gid)
                self.truncated.append(False)
                self.rows.append((-1, -1))
                self.valid.append(False)
            start += count


def all_alike(correct: np.ndarray) -> bool:
    """True if a group's samples are all correct or all wrong (dynamic sampling drops it)."""
    return bool(correct.all() or not correct.any())


def finish_rewards(kept: Groups, sampled: list, stats: dict) -> None:
    """Waits for every round's rewards (`sampled`: [(rollouts, PendingRewards, whole)],
    `whole` False for rounds whose rows are not whole prompt groups, e.g. DARS's extra
    rollouts); fills the kept rows' rewards and correctness (0 / False for padding rows)
    and the step's reward statistics."""
    results = [pending.result() for _, pending, _ in sampled]
    kept.rewards = [float(results[k].total[r]) if k >= 0 else 0.0 for k, r in kept.rows]
    kept.correct = [bool(results[k].correct[r]) if k >= 0 else False for k, r in kept.rows]
    total = np.concatenate([res.total for res in results])
    correct = np.concatenate([res.correct for res in results])
    groups = zero_std = gen_tokens = longest = 0
    for (rollouts, _, whole), res in zip(sampled, results, strict=True):
        gen_tokens += int(rollouts.lengths.sum())
        longest = max([longest] + rollouts.lengths.tolist())
        if not whole:
            continue
        for p in range(int(rollouts.prompt_index.max(initial=-1)) + 1):
            rows = np.flatnonzero(rollouts.prompt_index == p)
            groups += 1
            zero_std += int(np.ptp(res.total[rows]) == 0)
    stats.update({
        "frac_reward_zero_std": zero_std / max(groups, 1),
        "dynamic/rounds": sum(whole for *_, whole in sampled),
        "dynamic/kept_groups": kept.num_groups,
        "sampled/reward_mean": float(total.mean()) if total.size else 0.0,
        "sampled/accuracy": float(correct.mean()) if correct.size else 0.0,
        "sampled/all_zero": int(not np.any(total)),
        "sampled/response_length_max": longest,
        "generated_tokens": gen_tokens,
        "sampled/rows": sum(len(rollouts) for rollouts, *_ in sampled),
        "reward/timeouts": sum(res.timeouts for res in results),
        "reward/crashes": sum(res.crashes for res in results)})
    stats.update({f"reward/{name}": float(np.concatenate(
        [res.parts[name] for res in results]).mean()) if total.size else 0.0
        for name in results[0].parts})
