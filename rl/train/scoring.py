"""A step's completions sent to the reward workers, scored while the devices work.

    pending = submit_rollouts(run, rollouts, references)   # returns at once
    rewards = pending.result()                             # rl.rewards.Rewards over the rows

Each rollout row is decoded and scored against its prompt's reference by the run's
`RewardSpec` (rl.rewards: verifiers in worker processes with a hard per-item timeout).
With several processes each scores the rows it owns and `result()` joins them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models import multihost
from rl import rewards as rewards_lib


def submit_rollouts(run, rollouts, references: Sequence):
    """Starts scoring each rollout row against its prompt's reference (`.result()`:
    `rl.rewards.Rewards` over the R rows). With several processes each scores the
    rows it owns (`models.multihost.local_rows`) and `.result()` joins them."""
    rows = multihost.local_rows(len(rollouts))
    texts = [run.tokenizer.decode(rollouts.completion(r)) for r in rows]
    refs = [references[int(rollouts.prompt_index[r])] for r in rows]
    pending = run.algorithm.reward.submit(texts, refs)
    return pending if multihost.process_count() == 1 else JoinedRewards(pending)


class JoinedRewards:
    """Every process's `Rewards` over its rows, joined in process order by `result()`
    (a collective: every process calls it for the same batch)."""

    def __init__(self, local):
        self.local, self._result = local, None

    def result(self) -> rewards_lib.Rewards:
        if self._result is None:
            mine = self.local.result()
            blocks = multihost.allgather_json([{
                "total": mine.total.tolist(), "correct": mine.correct.tolist(),
                "parts": {k: v.tolist() for k, v in mine.parts.items()},
                "timeouts": mine.timeouts, "crashes": mine.crashes}])
            blocks = [b[0] for b in blocks]

            def join(get, dtype):
                return np.concatenate([np.asarray(get(b), dtype) for b in blocks])

            self._result = rewards_lib.Rewards(
                join(lambda b: b["total"], np.float32),
                {k: join(lambda b, k=k: b["parts"][k], np.float32) for k in mine.parts},
                join(lambda b: b["correct"], bool), sum(b["timeouts"] for b in blocks),
                sum(b["crashes"] for b in blocks))
        return self._result
