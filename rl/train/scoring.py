"""A step's completions sent to the reward workers, scored while the devices work.

    pending = submit_rollouts(run, rollouts, references)   # returns at once
    rewards = pending.result()                             # rl.rewards.Rewards over the rows

Each rollout row (a multi-turn episode: its last turn, `rl.train.multiturn.answer_tokens`)
is decoded and scored against its prompt's reference by the run's `RewardSpec` (rl.rewards: verifiers in worker processes with a hard per-item timeout).
With several processes each scores the rows it owns and `result()` joins them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from models import multihost
from rl import rewards as rewards_lib
from rl.checkpoint import agreement
from rl.train import multiturn


def submit_rollouts(run, rollouts, references: Sequence):
    """Starts scoring each rollout row against its prompt's reference (`.result()`:
    `rl.rewards.Rewards` over the R rows). With several processes each scores the
    rows it owns (`models.multihost.local_rows`) and `.result()` joins them."""
    rows = multihost.local_rows(len(rollouts))
    texts = [run.tokenizer.decode(multiturn.answer_tokens(rollouts, r)) for r in rows]
    refs = [references[int(rollouts.prompt_index[r])] for r in rows]
    pending = run.algorithm.reward.submit(texts, refs)
    return pending if multihost.process_count() == 1 else JoinedRewards(pending)


class JoinedRewards:
    """Every process's `Rewards` over its rows, joined in process order by `result()`
    (a collective: every process calls it for the same batch). Scoring that raises in
    one process raises `StepFailed` in every process there (the join carries the error),
    so the others do not wait for it in the step's next collective."""

    def __init__(self, local):
        self.local, self._result = local, None

    def result(self) -> rewards_lib.Rewards:
        if self._result is None:
            error = block = None
            try:
                mine = self.local.result()
                block = {"total": mine.total.tolist(), "correct": mine.correct.tolist(),
                         "parts": {k: v.tolist() for k, v in mine.parts.items()},
                         "timeouts": mine.timeouts, "crashes": mine.crashes}
            except Exception as e:  # noqa: BLE001 - every process learns of it below
                error = e
            blocks = [b[0] for b in multihost.allgather_json(
                [block if error is None else {"error": agreement.describe(error)}])]
            failure = agreement.failure_of([b.get("error") for b in blocks])
            if failure is not None:
                raise agreement.StepFailed(failure) from error

            def join(get, dtype):
                return np.concatenate([np.asarray(get(b), dtype) for b in blocks])

            self._result = rewards_lib.Rewards(
                join(lambda b: b["total"], np.float32),
                {k: join(lambda b, k=k: b["parts"][k], np.float32) for k in mine.parts},
                join(lambda b: b["correct"], bool), sum(b["timeouts"] for b in blocks),
                sum(b["crashes"] for b in blocks))
        return self._result
