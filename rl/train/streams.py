"""The three log-prob streams of an update, as the RL trainer's methods: π_old (the
proximal policy), which tokens the learner's own version sampled, and the learner's
per-token inputs with the behaviour policy's log-probs and versions.

`LogProbStreams` is a mixin of `rl.train.trainer.Trainer`; it reads the trainer's run,
learner, state, version, collector and asynchronous side.
"""

from __future__ import annotations

import numpy as np

from models.multihost import to_host


class LogProbStreams:
    def proximal(self, seqs, sequences):
        """π_old (the proximal policy: the learner's before this update) per token, on the
        device or host: a forward pass (`recompute`, and `recompute_stale` when a token
        was sampled by an older version), else the sampler's log-probs (`sampler`, and
        `interpolate`, which the learner replaces)."""
        how = self.run_.old_logp
        stale = bool(np.any(seqs.mask & ~self.fresh(seqs)))
        if how == "recompute" or (how == "recompute_stale" and stale):
            return self.learner.score(self.policy(), sequences)[0]
        return seqs.sampler_logp

    def fresh_from_sampler(self, seqs, old_logp: np.ndarray) -> np.ndarray:
        """`recompute_stale`: a token sampled by the learner's own version keeps the
        sampler's log-prob (it is the proximal policy's, to fp32 rounding: its behaviour
        weight is exactly 1); the others keep the recomputed one."""
        if self.run_.old_logp != "recompute_stale":
            return old_logp
        return np.where(self.fresh(seqs), seqs.sampler_logp, old_logp).astype(np.float32)

    def fresh(self, seqs) -> np.ndarray:
        """[rows, C] the tokens the learner's own version sampled from its own context:
        with kept pages (rollout.kv_on_update=keep), only while every earlier token of
        the row was that version's too (the others attend to older keys and values)."""
        own = seqs.versions == self.version
        if self.overlap is None or not self.collector.keep_kv:
            return own
        older = np.where(seqs.versions >= 0, seqs.versions, self.version) != self.version
        return own & ~np.logical_or.accumulate(older, axis=1)

    def update_inputs(self, seqs, grad_mask, adv, old_logp, ref_logp) -> dict:
        """The learner's per-token inputs: mask, advantages, π_old, π_ref, and, when the
        behaviour policy may differ from π_old (another version, or filtered sampling),
        the sampler's log-probs and each token's version (the off-policy correction)."""
        update = {"mask": grad_mask, "advantages": adv, "old_logp": old_logp,
                  "ref_logp": ref_logp}
        if self.run_.old_logp != "sampler":
            update["behavior_logp"] = seqs.sampler_logp
            # the learner counts versions in updates (TrainState.step), the trainer in
            # steps (a step whose batch kept nothing updates nothing): the same ages
            updates = int(to_host(self.state.step))
            update["versions"] = np.where(seqs.versions >= 0,
                                          seqs.versions - self.version + updates,
                                          -1).astype(np.int32)
        return update
