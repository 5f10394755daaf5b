"""Many arms over one frozen base in one process (`launch.sweep --shared_base`).

    frozen = arms.shared_frozen(runs[0], params)        # the base, once
    results = arms.run_group(runs, workdirs, frozen, streams)

A sweep's runs that differ only in what the learner reads (`rl.sweeps.ARM_KEYS`: the
loss, the advantage, the optimizer, dynamic sampling, minibatches) share the model, the
warm start, the seed, the data and the LoRA shape. `launch.arms` runs such a group as N
`ArmTrainer`s, one thread each, over one `rl.train.adapters.Frozen`: N adapter
pytrees and optimizer states, one base in memory, and one sampler call serving every
arm (`Batcher`: `sampling.generate(..., arms=)`, an adapter index per row).

The results equal the separate runs' to floating-point tolerance:
- each arm samples with its own key (keys [K], `sampling.processors.sample`) and its
  samples take the draws a call of their own takes (`sampling.arms`);
- the batches are the same whatever the threads' timing: the `Batcher` waits until
  every arm still running has asked, then serves the requests in arm order, those with
  the same sampler settings (n, `SamplingParams`) in one call. An arm's rounds
  (dynamic sampling, DARS's extras) are simply further requests;
- what differs is the batch shape: an arm's log-probs are sums over rows of a larger
  batch (~5e-6 apart), so over many steps a near tie can draw another token.
Each arm keeps its own workdir, logs, checkpoints and exports, exactly as a separate
run. Its checkpoints are written one at a time and synchronously
(`rl.checkpoint.persistent.serial_writes`): Orbax's managers collide when several
threads save at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import sampling
from models import lora as lora_lib
from models import multihost
from rl.checkpoint import persistent
from rl.train import adapters
from rl.train.build import Run
from rl.train.trainer import Trainer


def check(run: Run) -> None:
    """ValueError (one line) unless `run` can be an arm over a shared base."""
    cfg = run.cfg
    why = None
    if run.lora is None:
        why = "arms are LoRA adapters over one base: set lora.rank >= 1"
    elif cfg.lora.sampler == "merge":
        why = ("one sampler batch serves every arm's adapter factored: set lora.sampler "
               "to factored or auto, not merge")
    elif cfg.rollout.mode != "sync" or cfg.rollout.april:
        why = "arms sample synchronously: set rollout.mode=sync and rollout.april=False"
    elif (run.tree is not None or run.latr is not None or run.env is not None
          or run.speculative is not None):
        why = ("arms sample flat single-turn batches (no tree or latr sampler, no "
               "multi-turn env, no speculative decoding)")
    elif multihost.process_count() > 1:
        why = "a group of arms runs in one process"
    if why is not None:
        raise ValueError(f"--shared_base: {why}")


def shared_frozen(run: Run, params: Any) -> adapters.Frozen:
    """The group's frozen base from `params` (the first arm's warm start); its sampler
    runs the adapters factored, the one form that serves several in one batch."""
    settings = dataclasses.replace(run.lora, sampler="factored")
    return adapters.Frozen(settings, run.model_config, params, run.mesh, run.rules)


@dataclasses.dataclass
class Request:
    """One arm's sampler call, and its answer once served."""
    arm: int
    run: Run
    adapters: Any
    prompts: list
    n: int
    rng: jax.Array
    answer: Any = None  # (Rollouts, checksum mark, arms in the call) or the call's error
    served: bool = False

    def batch_key(self) -> tuple:
        s = self.run.cfg.sampling
        return (self.n, self.run.sampling_params, s.page_size, s.segment_len)


class Batcher:
    """Serves the arms' sampler calls in batches that do not depend on thread timing
    (module docstring): a batch is every live arm's next request."""

    def __init__(self, frozen: adapters.Frozen, arms: int, workers: int = 0):
        self.frozen, self.live, self.pending = frozen, set(range(arms)), {}
        self.cond = threading.Condition()
        self.calls = 0  # sampler calls made (for the tests and the logs)
        # at most `workers` arms compute at once (0: all); an arm waiting for its batch
        # gives its turn away
        self.turns = threading.BoundedSemaphore(workers) if workers else None

    @contextlib.contextmanager
    def turn(self):
        """Held while an arm computes (its updates, evals, checkpoints, host work)."""
        if self.turns is not None:
            self.turns.acquire()
        try:
            yield
        finally:
            if self.turns is not None:
                self.turns.release()

    def sample(self, arm: int, run: Run, adapters_: Any, prompts: list, n: int,
               rng: jax.Array) -> tuple[sampling.Rollouts, jax.Array, int]:
        """(arm's rollouts, the checksum of the adapter the sampler ran for it, the number
        of arms the call served)."""
        request = Request(arm, run, adapters_, prompts, n, rng)
        if self.turns is not None:
            self.turns.release()  # called within the arm's turn: waiting is not computing
        try:
            with self.cond:
                self.pending[arm] = request
                self._serve_when_complete()
                while not request.served:
                    self.cond.wait()
        finally:
            if self.turns is not None:
                self.turns.acquire()
        if isinstance(request.answer, BaseException):
            raise request.answer
        return request.answer

    def leave(self, arm: int) -> None:
        """Arm `arm` asks for nothing more (finished or failed)."""
        with self.cond:
            self.live.discard(arm)
            self._serve_when_complete()

    def _serve_when_complete(self) -> None:
        """Under the lock: serves the pending requests once every live arm has one."""
        if not self.pending or set(self.pending) != self.live:
            return
        batch = [self.pending.pop(arm) for arm in sorted(self.pending)]
        parts: dict[tuple, list[Request]] = {}
        try:
            for request in batch:
                parts.setdefault(request.batch_key(), []).append(request)
        except Exception as e:  # noqa: BLE001 - no arm may wait forever
            for request in batch:
                request.answer, request.served = e, True
            parts = {}
        for part in parts.values():
            part = _finite_only(part)
            try:
                answers = self._call(part) if part else []
            except Exception as e:  # noqa: BLE001 - every arm of the call gets the error
                answers = [e] * len(part)
            for request, answer in zip(part, answers, strict=True):
                request.answer, request.served = answer, True
        self.cond.notify_all()

    def _call(self, part: list[Request]) -> list[tuple[sampling.Rollouts, jax.Array, int]]:
        """One `sampling.generate` for requests of one batch key; each arm's rows back."""
        run, frozen = part[0].run, self.frozen
        stacked = lora_lib.stack([r.adapters for r in part])
        params = lora_lib.attach(frozen.base, stacked, frozen.lora)
        counts = [len(r.prompts) for r in part]
        s = run.cfg.sampling
        out = sampling.generate(
            run.model_config, params, [p for r in part for p in r.prompts], part[0].n,
            run.sampling_params, jnp.stack([r.rng for r in part]), page_size=s.page_size,
            segment_len=s.segment_len, sharding=run.act,
            arms=np.repeat(np.arange(len(part)), counts))
        self.calls += 1
        starts = np.concatenate([[0], np.cumsum(counts)])
        answers = []
        for k in range(len(part)):
            # the mark is the checksum of the slice the sampler ran, on the learner's layout
            ran = jax.device_put(jax.tree.map(lambda x, k=k: x[:, k], stacked),
                                 frozen.adapter_shardings)
            answers.append((rows(out, starts[k], starts[k + 1], part[0].n),
                            frozen.mark(ran), len(part)))
        return answers


@jax.jit
def _all_finite(tree: Any) -> jax.Array:
    return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def _finite_only(part: list[Request]) -> list[Request]:
    """The requests whose adapters are finite; the others are answered with an error. One
    batch multiplies every row by every adapter's b (`models.linear`), so a NaN or inf in
    one arm's adapter would reach every arm's rows."""
    ok = []
    for request in part:
        if bool(_all_finite(request.adapters)):
            ok.append(request)
        else:
            request.answer = FloatingPointError(
                f"arm {request.arm}'s adapters hold NaN or inf: it cannot share a sampler "
                "batch with other arms")
            request.served = True
    return ok


def rows(out: sampling.Rollouts, first: int, end: int, n: int) -> sampling.Rollouts:
    """The rollouts of prompts [first, end) of a call with `n` samples each, renumbered
    from 0 (as a call of their own numbers them)."""
    take = slice(first * n, end * n)
    fields = {f: getattr(out, f)[take] for f in ("tokens", "lengths", "logprobs",
                                                  "raw_logprobs", "finish_reason")}
    return dataclasses.replace(out, **fields, prompt_index=out.prompt_index[take] - first,
                               stats=dict(out.stats))


class ArmTrainer(Trainer):
    """A `Trainer` over a shared `Frozen` whose sampler calls go through a `Batcher`."""

    def __init__(self, run: Run, workdir: str, frozen: adapters.Frozen, batcher: Batcher,
                 arm: int, *, stream=None):
        check(run)
        super().__init__(run, None, workdir, stream=stream, frozen=frozen)
        self.batcher, self.arm = batcher, arm
        self.batched = 0  # arms served by the last sampler call (metric arms/batched)

    def _sample(self, prompts, n, rng, **flat) -> sampling.Rollouts:
        if flat:
            raise ValueError(f"an arm's sampler takes no options, got {sorted(flat)}")
        rollouts, self.copies.sampled, self.batched = self.batcher.sample(
            self.arm, self.run_, self.state.params, prompts, n, rng)
        return rollouts

    def step(self, step: int = 0) -> dict[str, float]:
        """`Trainer.step`, and how many arms the step's last sampler call served."""
        return super().step(step) | {"arms/batched": self.batched}


def run_group(runs: list[Run], workdirs: list[str], frozen: adapters.Frozen,
              streams: list, workers: int = 0) -> list[dict | BaseException]:
    """Trains every arm (thread i: `runs[i]` in `workdirs[i]`, its console on
    `streams[i]`) over `frozen`, at most `workers` computing at once (0: all); returns
    each arm's `Trainer.run()` summary, or the exception that stopped it (the others go
    on)."""
    # Orbax's managers may not write at once from several threads (rl.checkpoint.persistent)
    persistent.serial_writes()
    batcher = Batcher(frozen, len(runs), workers)
    trainers = [ArmTrainer(run, workdir, frozen, batcher, i, stream=stream)
                for i, (run, workdir, stream) in enumerate(zip(runs, workdirs, streams,
                                                               strict=True))]
    results: list[Any] = [None] * len(runs)

    def work(i: int) -> None:
        try:
            with batcher.turn():
                results[i] = trainers[i].run()
        except BaseException as e:  # noqa: BLE001 - reported per arm by the caller
            results[i] = e
        finally:
            batcher.leave(i)

    threads = [threading.Thread(target=work, args=(i,), name=f"arm-{i}", daemon=True)
               for i in range(len(runs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
