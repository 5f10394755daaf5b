"""The fault-tolerant step loop shared by RL (`rl.train.trainer`) and SFT (`rl.train.sft`).

    summary = fit(job, directory=os.path.join(workdir, "checkpoints"), section=cfg.checkpoint)

A job is an object with
  run_ (rl.train.build.Run), checkpoint_config (what a resume must match), total_steps,
  log (rl.train.logs.RunLog)
  get_state() / set_state(tree)   every device array it changes ("params" + the rest)
  host_state() / set_host_state(d)   JSON: data position, counters
  data_state() / set_data_state(d)   the data iterator's position alone
  rolled_back(skips) (optional)    after a rollback restored the state: {step: the
                                   data_state each replayed step skips to}
  step(step) -> metrics            one step; raises on failure
  evaluate() -> metrics, eval_due(step), after_step(step) (exports)
`fit`:
  * resumes from the newest usable checkpoint in `directory` (damaged ones are
    skipped with a warning) and rewinds the logs to it;
  * runs the steps; every `snapshot_every` steps it snapshots the state in host
    memory (`rl.checkpoint.snapshot`), every `every` steps, once `every_s` seconds
    have passed since the last save, and at the end it writes a persistent
    checkpoint (`rl.checkpoint`, asynchronous);
  * a step that raises, or whose loss or gradient norm is not finite, is rolled
    back: the last snapshot is restored, the batch the step consumed is skipped
    (the iterator keeps its position past it), a `rollback` event goes to the
    log, and the loop goes on from the snapshot's step. `max_rollbacks` failed
    steps in a row stop the run (`RunStopped`) after saving the last good state;
  * on SIGTERM / SIGINT (`rl.checkpoint.preemption`) it checkpoints at the end of the step
    and raises `Preempted`; an abandoned step saves the last snapshot instead.
With several processes each step ends with one decision every process takes together
(`rl.checkpoint.agreement`): a failure in any process rolls back all of them, a signal to
any stops all of them after the same step, the time-based save is due on process 0's
clock. A collective that fails because another process is gone raises `PeerLost` (no
checkpoint is written: that needs every process); so does an abandoned step there.
"""

from __future__ import annotations

import math
import signal
import sys
from typing import Any

import jax

from models import multihost, paths
from rl.checkpoint.agreement import Agreement, PeerLost, StepFailed, Verdict, describe
from rl.checkpoint.persistent import Checkpoints
from rl.checkpoint.preemption import Abandoned, Preempted, Watch
from rl.checkpoint.snapshot import Snapshots

FINITE_KEYS = ("learner/loss", "learner/grad_norm", "loss", "grad_norm")


class RunStopped(Exception):
    """The run cannot go on (repeated failures); a checkpoint of the last good state exists."""


class NonFinite(ArithmeticError):
    """A step's loss or gradient norm is NaN or infinite."""


def check_finite(metrics: dict) -> None:
    for key in FINITE_KEYS:
        value = metrics.get(key)
        if value is not None and not math.isfinite(float(value)):
            raise NonFinite(f"non-finite {key} ({float(value)})")


def _signal_name(signum: int | None) -> str:
    return signal.Signals(signum).name if signum else "a signal"


class _Loop:
    def __init__(self, job, directory: str, section, stream):
        self.job, self.section, self.stream = job, section, stream or sys.stderr
        self.ckpts = Checkpoints(directory, config=job.checkpoint_config,
                                 run_config=job.run_.cfg, keep=section.keep,
                                 asynchronous=section.asynchronous, stream=self.stream)
        self.snaps = Snapshots()
        self.skips: dict[int, dict] = {}  # step -> data position to continue from there
        self.saved: set[int] = set()  # steps this process has checkpointed
        self.template = None
        self.agreement = Agreement(section.every_s)
        self.gone = False  # another process is lost: nothing that needs it may run
        self.step = 0  # the step running

    # -- state --------------------------------------------------------------------------------
    def host(self) -> dict:
        return {"job": self.job.host_state(),
                "skips": {str(k): v for k, v in sorted(self.skips.items())}}

    def load(self, state: Any, host: dict) -> None:
        self.job.set_state(state)
        self.job.set_host_state(host["job"])
        self.skips = {int(k): v for k, v in host["skips"].items()}

    def save(self, step: int, *, wait: bool = False) -> None:
        """A persistent checkpoint of the current state as `step` (once per step: a step
        saved earlier, on disk or still being written, is only waited for)."""
        if step in self.saved or step in self.ckpts.steps():
            if wait:
                self.ckpts.wait()
            return
        self.ckpts.save(step, self.job.get_state(), self.host(), wait=wait)
        self.saved.add(step)
        self.agreement.saved()

    def save_snapshot(self) -> int:
        """Restores the last complete snapshot and writes it to disk; returns its step."""
        step, state, host = self.snaps.restore(self.template)
        self.load(state, host)
        self.job.log.rewind(step)
        self.save(step, wait=True)
        return step

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=self.stream, flush=True)

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> dict:
        job, s = self.job, self.section
        self.template = job.get_state()
        found = self.ckpts.restore_latest(self.template)
        start = 0
        if found is not None:
            start, state, host = found
            self.load(state, host)
        if start >= job.total_steps:  # nothing to run: the logs stay as they are
            self.ckpts.close()
            return {"before": job.log.record(0), "after": job.log.record(start),
                    "resumed_from": start, "finished": True}
        if start:
            job.log.rewind(start)
            print(f"resumed from checkpoint step {start} ({self.ckpts.path(start)})",
                  file=job.log.stream, flush=True)
        else:
            job.log.start_over()
        if start == 0:
            before = job.evaluate()
            if before:
                job.log.write(0, before, console=False)
        before = job.log.record(0)
        self.snaps.take(start, job.get_state(), self.host())
        try:
            with Watch(s.abandon_after_s, stream=self.stream) as watch:
                metrics = self.steps(start, watch)
        except Abandoned:
            if multihost.process_count() > 1:  # the others may be inside the step's collectives
                raise self.lost(
                    f"it abandoned its step after {_signal_name(watch.requested)} "
                    f"(checkpoint.abandon_after_s={s.abandon_after_s:g}), and with several "
                    "processes the snapshot cannot be saved while the others may be inside "
                    "the step") from None
            saved = self.save_snapshot()
            raise Preempted(watch.requested or 15, saved, self.ckpts.path(saved)) from None
        except PeerLost as e:
            raise self.lost(
                f"a collective failed ({e}): another process of the run died, hung or was "
                "stopped, and nothing can be saved without it") from e
        except (Preempted, RunStopped):
            raise
        except Exception as e:
            if multihost.process_count() == 1:
                raise
            # after a step's decision (a save, a snapshot, an export): not decided together,
            # so the others may wait for this process in a collective it will not reach
            raise self.lost(f"{describe(e)}, after step {self.step}'s decision, where the "
                            "processes cannot roll back together") from e
        finally:
            if not self.gone:  # closing waits for writes that need the lost process
                self.ckpts.close()
        after = {k: v for k, v in metrics.items() if k.startswith("heldout/")}
        return {"before": before, "after": after, "resumed_from": start, "finished": False}

    def steps(self, start: int, watch: Watch) -> dict:
        """Steps start + 1 .. total_steps; each ends with every process's decision
        (`rl.checkpoint.agreement`). Returns the last step's metrics."""
        job, s = self.job, self.section
        metrics: dict = {}
        failures = 0
        step = start + 1
        while step <= job.total_steps:
            self.step, error = step, None
            try:
                if step in self.skips:
                    job.set_data_state(self.skips[step])
                metrics = job.step(step)
                check_finite(metrics)
                if job.eval_due(step):
                    metrics.update(job.evaluate())
            except Exception as e:  # noqa: BLE001 - any failure of a step rolls back
                error = e
            if isinstance(error, StepFailed):  # every process already knows
                verdict = Verdict(error.cause, 0, False)
            else:
                verdict = self.agreement.decide(error, watch.requested)
            if verdict.failure is not None:
                failures += 1
                step = self.rollback(step, error, verdict.failure, failures)
                continue
            failures = 0
            job.log.write(step, metrics)
            if s.snapshot_every and step % s.snapshot_every == 0:
                self.snaps.take(step, job.get_state(), self.host())
            if ((s.every and step % s.every == 0) or step == job.total_steps
                    or verdict.save_due):
                self.save(step)
            job.after_step(step)
            if verdict.signum:
                self.save(step, wait=True)
                raise Preempted(verdict.signum, step, self.ckpts.path(step))
            step += 1
        return metrics

    def lost(self, why: str) -> PeerLost:
        """The one-line `PeerLost` this process stops with: no checkpoint can be written
        (a collective) without the other processes."""
        self.gone = True
        return PeerLost(
            f"process {jax.process_index()} of {multihost.process_count()} stopped: {why}. "
            "Restart every process with the same command to resume from the newest "
            f"complete checkpoint in {self.ckpts.directory}")

    def rollback(self, step: int, error: Exception | None, cause: str, failures: int) -> int:
        """Restores the last snapshot after step `step` failed (in this process: `error`;
        in any: `cause`); returns the step to run next."""
        if failures >= self.section.max_rollbacks:
            saved = self.save_snapshot()
            raise RunStopped(
                f"step {step} failed {failures} times in a row (checkpoint.max_rollbacks="
                f"{self.section.max_rollbacks}; last: {cause}). The last good state is "
                f"saved as {self.ckpts.path(saved)}: fix the cause and rerun to resume") from error
        position = self.job.data_state()  # past the batch the failed step consumed
        skips = dict(self.skips)  # a snapshot older than a past rollback lacks its skip
        restored, state, host = self.snaps.restore(self.template)
        self.load(state, host)
        self.skips = {**self.skips, **{k: v for k, v in skips.items() if k > restored},
                      step: position}
        if hasattr(self.job, "rolled_back"):  # before any step runs again
            self.job.rolled_back(dict(self.skips))
        self.job.log.rewind(restored)
        self.job.log.event(step, "rollback", cause=cause, restored_step=restored,
                           consecutive=failures)
        self.warn(f"step {step} failed ({cause}): rolled back to step {restored} and skipped "
                  f"its batch ({failures}/{self.section.max_rollbacks} in a row)")
        return restored + 1


def fit(job, *, directory: str, section, stream=None) -> dict:
    """Runs `job` to `job.total_steps` with resume, snapshots, rollback and preemption
    (see the module doc). Returns {"before", "after", "resumed_from", "finished"}."""
    paths.makedirs(paths.dirname(paths.absolute(directory)))
    return _Loop(job, directory, section, stream).run()
