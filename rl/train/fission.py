"""Fission-GRPO (arXiv 2601.15625): failed tool episodes, cut after their first failed
turn and the tool's error reply, become new prompts, resampled on-policy as new groups.

    buffer = Buffer(capacity)
    buffer.push(harvest(groups))               # after a step: its failed episodes
    metrics = after_step(trainer, step, groups)   # all of it, for the trainer
    items = buffer.pop(prompts_per_step)       # when due: the most recent ones (LIFO)

An episode *fails* at its first turn with a failed call: a call the parser cannot read
or a tool that answers with an error (`rl.envs.environment.Record.failure`). Its
corrective prompt is the original prompt, the episode's tokens up to the end of that
turn, and the environment's reply to it (the real error message: the paper's trained
error simulator is not part of this project), token for token as sampled, so nothing
is re-tokenised. The trainer samples sampling.n episodes of each popped prompt under the
current policy, scores their final answers against the original reference and makes an
extra GRPO update on those groups (docs/algorithms.md, "Fission-GRPO").
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from rl.train.groups import Groups
from rl.train.logs import TIMING_PREFIXES


@dataclasses.dataclass(frozen=True)
class Item:
    prompt: tuple[int, ...]   # the corrective prompt's tokens
    reference: Any            # the original prompt's verifier reference


def corrective(prompt, completion, failure) -> tuple[int, ...]:
    """The prompt, the completion's tokens up to its failed turn's end, the error reply
    (`failure` = (end, reply tokens), `Record.failure`)."""
    end, reply = failure
    if not 0 < end <= len(completion) or not reply:
        raise ValueError(f"a failure at token {end} with a reply of {len(reply)} tokens does "
                         f"not fit a completion of {len(completion)} tokens")
    return tuple(prompt) + tuple(completion[:end]) + tuple(reply)


def harvest(groups: Groups) -> list[Item]:
    """The corrective prompts of a step's failed episodes (valid rows), in row order."""
    out = []
    for row, record in enumerate(groups.episodes):
        if record is None or record.failure is None or not groups.valid[row]:
            continue
        gid = groups.group_ids[row]
        out.append(Item(corrective(groups.prompts[gid], groups.completions[row],
                                   record.failure), groups.references[gid]))
    return out


class Buffer:
    """Last in, first out, at most `capacity` items (the oldest are dropped)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity, self.items = capacity, []

    def __len__(self) -> int:
        return len(self.items)

    def push(self, items: list[Item]) -> int:
        """Adds `items` (the last is the most recent); returns how many were dropped."""
        self.items.extend(items)
        dropped = max(0, len(self.items) - self.capacity)
        del self.items[:dropped]
        return dropped

    def pop(self, count: int) -> list[Item]:
        """The `count` most recent items, most recent first (fewer if it holds fewer)."""
        count = min(count, len(self.items))
        taken = self.items[len(self.items) - count:][::-1]
        del self.items[len(self.items) - count:]
        return taken

    def state(self) -> list[dict]:
        return [{"prompt": list(item.prompt), "reference": item.reference}
                for item in self.items]

    def set_state(self, rows: list[dict]) -> None:
        self.items = [Item(tuple(row["prompt"]), row["reference"]) for row in rows]


def after_step(trainer, step: int, groups: Groups) -> dict:
    """After a step's update (`rl.train.trainer.Trainer`): keeps `groups`' failed episodes
    as corrective prompts; when due, samples groups of the most recent ones and updates
    on them too. Metrics under fission/ (timing ones under time/fission_, perf/fission_)."""
    buffer, m = trainer.collector.fission, trainer.cfg.rl.multiturn
    pushed = harvest(groups)
    dropped = buffer.push(pushed)
    out = {"fission/pushed": len(pushed), "fission/dropped": dropped}
    want = trainer.cfg.train.prompts_per_step
    if len(buffer) >= want and step % m.fission_every == 0:
        items = buffer.pop(want)
        start = time.perf_counter()
        kept, stats, finish, trainer.rng = trainer.collector.collect_prompts(
            [list(i.prompt) for i in items], [i.reference for i in items], trainer.rng,
            trainer.version)
        metrics = trainer.update(step, kept, stats, finish, start)
        out |= {k.replace("/", "/fission_", 1) if k.startswith(TIMING_PREFIXES)
                else f"fission/{k}": v for k, v in metrics.items()} | {"fission/updated": 1}
    return out | {"fission/buffer": len(buffer)}
