"""The fault decisions every process of a multi-process run takes together, at the same
point of the same step (docs/fault_tolerance.md, "Several processes").

    agree = Agreement(every_s=600)
    verdict = agree.decide(error, signum)   # the end of each step: one tiny collective
    if verdict.failure: roll back           # any process failed -> every process rolls back
    if verdict.save_due: save               # checkpoint.every_s, on process 0's clock
    if verdict.signum: save; stop           # any process was signalled -> every one stops

    settle(error)                           # inside a step, after an injected fault

A step that raises in one process only (a verifier bug, a bad row, an injected fault)
must not leave the others waiting in the step's next collective. So the host code of a
step that may fail is followed by a decision point before the next collective: the
reward join (`rl.train.scoring`: the verifiers, the step's host code that may fail),
`decide` at the end of the step, and `settle` where `fault.*` injects a failure after
the rollout (`rl.checkpoint.faults`). Each is a collective every
process calls; a failure anywhere raises `StepFailed` in every process there, and the
step is rolled back everywhere.

A collective that fails because another process is gone (killed, lost) raises `PeerLost`:
this process cannot go on (every later collective needs the lost one) and the entry point
exits with one line. In one process every decision is local and nothing is exchanged.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from models import multihost
from rl.checkpoint.storage import one_line


class StepFailed(RuntimeError):
    """A step failed in some process; raised in every process at the same point (the
    failing process chains its own error). `cause` names the error and the process."""

    def __init__(self, cause: str):
        self.cause = cause
        super().__init__(cause)


class PeerLost(Exception):
    """A collective failed: another process of the run died or cannot be reached."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    failure: str | None   # the cause, when any process's step failed
    signum: int           # a preemption signal some process received (0: none)
    save_due: bool        # checkpoint.every_s seconds have passed since the last save


def describe(error: BaseException) -> str:
    return one_line(error, 240)


def _exchange(row: list[int]) -> np.ndarray:
    """Every process's `row` (int32, the same length everywhere), one row per process in
    process order; a failure of the collective is `PeerLost`."""
    mine = np.asarray(row, np.int32)
    if multihost.process_count() == 1:
        return mine[None]
    try:
        return multihost.allgather_rows(mine).reshape(-1, mine.size)
    except Exception as e:  # noqa: BLE001 - any failure here: the others are unreachable
        raise PeerLost(describe(e)) from e


def _causes(error: BaseException | None) -> list[str | None]:
    """Each process's failure description (None where it did not fail); a collective."""
    mine = describe(error) if error is not None else None
    try:
        return [items[0] for items in multihost.allgather_json([mine])]
    except Exception as e:  # noqa: BLE001
        raise PeerLost(describe(e)) from e


def failure_of(causes: list[str | None]) -> str | None:
    """One cause for the log out of every process's (None: no process failed): the
    first failed process's, naming it when there are several processes."""
    failed = [(p, c) for p, c in enumerate(causes) if c is not None]
    if not failed:
        return None
    process, cause = failed[0]
    if len(causes) == 1:
        return cause
    others = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
    return f"{cause} (process {process}{others})"


def settle(error: BaseException | None) -> None:
    """A decision point inside a step: raises in every process when `error` is set in
    any (every process must call it at the same point). One process: re-raises `error`."""
    if multihost.process_count() == 1:
        if error is not None:
            raise error
        return
    if not _exchange([error is not None])[:, 0].any():
        return
    raise StepFailed(failure_of(_causes(error))) from error


class Agreement:
    """The end-of-step decision (`decide`) and the time-based save policy's clock."""

    def __init__(self, every_s: float = 0.0, clock=time.monotonic):
        self.every_s, self.clock = every_s, clock
        self.last_save = clock()

    def saved(self) -> None:
        """A persistent checkpoint was just written: the every_s clock starts again."""
        self.last_save = self.clock()

    def decide(self, error: BaseException | None, signum: int | None) -> Verdict:
        """Every process's verdict on the step that just ended (a collective): its failure
        (`error`: this process's), the preemption signal and whether a save is due are the
        same in every process (the lowest-numbered signalled process's signal; process 0's
        clock)."""
        elapsed_ms = min(int((self.clock() - self.last_save) * 1000), 2**31 - 1)
        rows = _exchange([error is not None, signum or 0, elapsed_ms])
        failure = None
        if rows[:, 0].any():
            failure = failure_of(_causes(error)) if len(rows) > 1 else describe(error)
        signals = [int(s) for s in rows[:, 1] if s]
        due = self.every_s > 0 and int(rows[0, 2]) >= self.every_s * 1000
        return Verdict(failure, signals[0] if signals else 0, due)
