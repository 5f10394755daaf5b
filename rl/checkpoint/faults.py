"""Fault injection for the fault-tolerance tests (`config.fault`, off by default).

    fault.enabled=True fault.nan_at_step=5     # step 5's advantages are NaN -> NaN loss
    fault.enabled=True fault.raise_at_step=5   # step 5 raises after its rollout
    fault.enabled=True fault.kill_at_step=5    # SIGKILL to itself after step 5's rollout
    fault.enabled=True fault.term_at_step=5    # SIGTERM to itself there (a preemption)
    fault.enabled=True fault.kill_after_step=5 # SIGKILL once step 5's checkpoint write began
    fault.times=3                              # the nan/raise fault hits 3 attempts in a row
    fault.process=1                            # only process 1 of a multi-process run

Each fault hits the step after its data was consumed, like a real failure
(a verifier bug, a bad row, a device error). A fault key set without
`fault.enabled` is refused at start-up (`check`), so no run is broken by
accident. In a multi-process run every process injects the fault unless
`fault.process` names one (`-1`, the default: all of them).
"""

from __future__ import annotations

import os
import signal

import jax

from rl.checkpoint import agreement

KEYS = ("nan_at_step", "raise_at_step", "kill_at_step", "term_at_step", "kill_after_step")
ONCE = ("kill_at_step", "term_at_step", "kill_after_step")  # signals: once per process


class InjectedFault(RuntimeError):
    """The exception `raise_at_step` raises."""


def check(section) -> None:
    """Refuses fault keys without `fault.enabled`, and negative values."""
    for key in (*KEYS, "times"):
        if section[key] < 0:
            raise ValueError(f"fault.{key} must be >= 0, got {section[key]}")
    on = [k for k in KEYS if section[k]]
    if on and not section.enabled:
        raise ValueError(f"fault.{on[0]} is set but fault.enabled is False: fault injection is "
                         "for tests; set fault.enabled=True to inject faults on purpose")
    if section.times < 1:
        raise ValueError(f"fault.times must be >= 1, got {section.times}")
    if not -1 <= section.process < jax.process_count():
        raise ValueError(f"fault.process must be -1 (every process) or a process index in "
                         f"[0, {jax.process_count()}), got {section.process}")


class Faults:
    """The faults of one process; each nan/raise fault hits `times` attempts."""

    def __init__(self, section=None):
        enabled = section is not None and section.enabled
        self.settles = enabled  # every process decides together whether the fault hit
        self.section = section if enabled and section.process in (
            -1, jax.process_index()) else None
        self.hits = {k: 0 for k in KEYS}

    def _due(self, key: str, step: int) -> bool:
        if self.section is None or self.section[key] != step:
            return False
        if self.hits[key] >= (1 if key in ONCE else self.section.times):
            return False
        self.hits[key] += 1
        return True

    def after_rollout(self, step: int) -> None:
        """Kills the process or raises, when configured for `step`. The raise is decided
        by every process (`agreement.settle`: a collective, when faults are enabled), so
        with `fault.process` set the others roll back with the one that failed."""
        if self._due("kill_at_step", step):
            os.kill(os.getpid(), signal.SIGKILL)
        if self._due("term_at_step", step):
            os.kill(os.getpid(), signal.SIGTERM)
        error = None
        if self._due("raise_at_step", step):
            error = InjectedFault(f"injected fault at step {step} (fault.raise_at_step)")
        if self.settles:
            agreement.settle(error)

    def after_step(self, step: int) -> None:
        """Kills the process at the end of step `step` (`fault.kill_after_step`): after the
        loop started that step's checkpoint, whose asynchronous write is then in flight."""
        if self._due("kill_after_step", step):
            os.kill(os.getpid(), signal.SIGKILL)

    def poison(self, step: int) -> bool:
        """Whether this step's advantages are to be NaN (fault.nan_at_step)."""
        return self._due("nan_at_step", step)
