"""Warnings for a run that cannot learn, from each step's metrics (the trainer's).

    progress = Progress(cfg, vocab_size, stream)
    progress.check(step, metrics)     # prints `warning: ...` lines to `stream`
    host = progress.state()           # its counters, for checkpoints

Three conditions: every reward 0 over the first steps (nothing to learn from), a step
whose dynamic sampling kept no group (its update is skipped), and a policy whose token
distribution has collapsed towards uniform (e.g. a learning rate far too high: it samples
noise and no update brings it back).
"""

from __future__ import annotations

import math

ZERO_REWARD_STEPS = 10  # all-zero rewards over this many first steps -> a warning
# a policy whose mean token entropy was once below STRUCTURED × ln V (ln V: a uniform
# policy's) and is now above COLLAPSED × ln V has collapsed (a random init starts near
# uniform and says nothing)
COLLAPSED_ENTROPY, STRUCTURED_ENTROPY = 0.9, 0.6


class Progress:
    def __init__(self, cfg, vocab_size: int, stream):
        self.cfg, self.vocab_size, self.stream = cfg, vocab_size, stream
        self.zero_reward_steps = 0  # consecutive steps from the start with every reward 0
        self.empty_steps = 0        # steps whose dynamic sampling kept no group
        self.collapsed_steps = 0    # steps whose policy was near uniform (COLLAPSED_ENTROPY)
        self.entropy_min = None     # the lowest mean token entropy so far

    def state(self) -> dict:
        return {"zero_reward_steps": self.zero_reward_steps, "empty_steps": self.empty_steps,
                "collapsed_steps": self.collapsed_steps, "entropy_min": self.entropy_min}

    def set_state(self, host: dict) -> None:
        self.zero_reward_steps, self.empty_steps = host["zero_reward_steps"], host["empty_steps"]
        self.collapsed_steps = host.get("collapsed_steps", 0)  # absent before format 2
        self.entropy_min = host.get("entropy_min")

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=self.stream, flush=True)

    def check(self, step: int, metrics: dict) -> None:
        """Warns when the run cannot learn (the module docstring's three conditions)."""
        self.check_collapse(step, metrics.get("entropy"))
        if self.zero_reward_steps == step - 1 and metrics.get("sampled/all_zero"):
            self.zero_reward_steps = step
            if step == min(ZERO_REWARD_STEPS, self.cfg.train.steps):
                self.warn(
                    f"every sampled completion scored 0 over the first {step} steps: with "
                    "identical rewards every advantage is 0 and the policy does not change. "
                    "Start from a policy that sometimes succeeds (train.warm_start=sft for "
                    "procedural tasks, or model.hf_path), or make the task easier")
        if metrics.get("batch/rows") == 0:
            self.empty_steps += 1
            if self.empty_steps == 1 or self.empty_steps % 10 == 0:
                self.warn(
                    f"step {step}: dynamic sampling kept no group ({self.empty_steps} such "
                    f"steps so far): in all {metrics['dynamic/rounds']} rounds every prompt's "
                    "samples scored alike (all right or all wrong), so there is nothing to "
                    "learn and the update was skipped. Raise train.dynamic_max_rounds or "
                    "sampling.n, or use a task nearer the policy's level")

    def check_collapse(self, step: int, entropy: float | None) -> None:
        """The collapse warning of `check` (the first step, then every 50th)."""
        if entropy is None:
            return
        uniform = math.log(self.vocab_size)
        lowest = entropy if self.entropy_min is None else min(self.entropy_min, entropy)
        self.entropy_min = lowest
        if lowest >= STRUCTURED_ENTROPY * uniform or entropy < COLLAPSED_ENTROPY * uniform:
            return
        self.collapsed_steps += 1
        if self.collapsed_steps == 1 or self.collapsed_steps % 50 == 0:
            self.warn(
                f"step {step}: the policy's mean token entropy is {entropy:.2f} nats, "
                f"{entropy / uniform:.0%} of a uniform distribution over its "
                f"{self.vocab_size} tokens, up from {lowest:.2f} "
                f"({self.collapsed_steps} such steps so far): it has collapsed and samples "
                f"noise. Lower optim.lr (now {self.cfg.optim.lr:g}) or raise "
                "optim.warmup_steps, and start again")
