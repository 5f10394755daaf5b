"""The sampler side of `rollout.mode=one_step_off | async`: calls in a thread, ahead of the
learner by a fixed number of policy versions.

    weights = Weights()                         # the policy versions the sampler may use
    pipe = Pipeline(produce, weights, lag=1)    # call c samples under version c - 1 - lag
    pipe.start(next_call=1, ready={})
    batch = pipe.take(1)                        # the learner's batch for step 1 (blocks)
    weights.publish(1, params_on_sampler_mesh)  # after each update
    queue, state = pipe.capture(1)              # what a checkpoint at step 1 holds
    pipe.stop()

Call c produces batch c, sampled under policy version max(0, c - 1 - lag - d_c), d_c the
batches dropped before c (a rolled-back step drops the batch it failed on, and the steps
after it train the next batches: the version lag stays). A pipeline restarted from a
snapshot has only the snapshot's version: a call that would need an older one uses it
(`call_version`'s floor; only after a dropped batch). The
version is a function of the call, not of the clock: where the learner is late the
sampler waits for the version it needs (`Weights.get`), where it is early the weights
wait for their call. So a run is the same bit for bit however fast either side is, a
checkpoint resumes it exactly, and the overlap is whatever the two sides' speeds allow
(`benchmarks/async.py` measures it).

`produce(call, params, version)` returns a `Produced`: the batch (host data) and the
rollout's host state right after the call (data position, carry, PRNG key). A checkpoint
taken at the end of step n holds the batches produced for the steps after n and the
state after the last of them (`capture`): the calls up to n + lag need versions up to
n - 1 only, so they are always complete or completable without waiting for the learner.
The inline pipeline (`threaded=False`, used with several processes) makes the same calls
in the learner's thread: `pump` after each update is dispatched, so a call's programs run
on the sampler's devices while the update runs on the learner's. Multi-controller JAX
numbers every program launch of a process with one counter, which must agree across the
processes: two threads would launch in a different order in each process, and their
collectives would wait for ever. The calls, their versions and the results are the same.

A call that fails stops the calls after it; the learner's `take` of that call raises
`CallFailed` inside its step, which is rolled back and drops the call (the trainer then
restarts the pipeline from the restored state). A dropped call is not made: `skip` moves
the rollout past its data, so a failure that comes from the data is not met again. A
checkpoint taken while a call has failed holds what was made before it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any


class Stopped(Exception):
    """The pipeline was stopped while a call waited."""


@dataclasses.dataclass
class Produced:
    """One call's batch and what the rollout was right after it."""

    batch: Any           # the learner's input (host data, JSON/NumPy: it is checkpointed)
    state: dict          # the rollout's host state after this call
    version: int         # the policy version the call started under
    started: float = 0.0  # time.perf_counter() at the call's start and end (the timeline)
    ended: float = 0.0


class Weights:
    """Policy versions published by the learner, taken by the sampler (thread-safe).

    `publish(v, params)` after update v; `get(v)` blocks until version v is there;
    versions older than the sampler's newest request are dropped (`release`)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._versions: dict[int, Any] = {}
        self._stopped = False
        self.waited_s = 0.0  # time the sampler spent waiting for versions

    def publish(self, version: int, params: Any) -> None:
        with self._cond:
            self._versions[version] = params
            self._cond.notify_all()

    def get(self, version: int) -> Any:
        start = time.perf_counter()
        with self._cond:
            while version not in self._versions:
                if self._stopped:
                    raise Stopped(f"stopped while waiting for policy version {version}")
                self._cond.wait(timeout=1.0)
            self.waited_s += time.perf_counter() - start
            return self._versions[version]

    def release(self, below: int) -> None:
        """Drops every version older than `below` (the sampler will never ask for it)."""
        with self._cond:
            for v in [v for v in self._versions if v < below]:
                del self._versions[v]

    def reset(self) -> None:
        with self._cond:
            self._versions.clear()
            self._stopped = False

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def held(self) -> list[int]:
        with self._cond:
            return sorted(self._versions)


def call_version(call: int, lag: int, dropped: frozenset[int] | set[int],
                 floor: int = 0) -> int:
    """The policy version call `call` samples under: max(floor, call - 1 - lag - d), d the
    dropped batches before it (each shifts the learner's steps by one), `floor` the version
    the pipeline (re)started from (older versions are gone)."""
    return max(floor, call - 1 - lag - sum(1 for d in dropped if d < call))


class Pipeline:
    """Runs `produce` for calls next_call, next_call + 1, ... in a thread, or, `threaded`
    False, when the learner asks (module doc). A dropped call is not made: `skip(call)`
    moves the rollout past its data and returns its state."""

    def __init__(self, produce: Callable[[int, Any, int], Produced], weights: Weights,
                 lag: int, *, last_call: Callable[[], int], skip: Callable[[int], dict],
                 context: Callable[[], contextlib.AbstractContextManager]
                 = contextlib.nullcontext, threaded: bool = True):
        if lag < 0:
            raise ValueError(f"lag must be >= 0, got {lag}")
        self.produce, self.skip, self.weights, self.lag = produce, skip, weights, lag
        # False: no thread; the learner makes the calls itself (`take`, `pump`), in the
        # same order and under the same versions
        self.threaded = threaded
        self.context = context  # entered around every call (e.g. its devices' collectives)
        self.last_call = last_call  # the last call to make (the run's steps + dropped)
        self._cond = threading.Condition()
        self._ready: dict[int, Produced] = {}   # calls made and not yet taken
        self._states: dict[int, dict] = {}      # call -> the rollout's state after it
        self._error: BaseException | None = None  # a call's failure, for the learner's take
        self._thread: threading.Thread | None = None
        self._stop = False
        self.dropped: set[int] = set()
        self.next_call = 1
        self.taken = 0
        self.floor, self.first_call = 0, 1

    @property
    def stopping(self) -> bool:
        """True once `stop` was asked: a call in progress may give up (its output is
        discarded)."""
        return self._stop

    # -- making calls ---------------------------------------------------------------------------
    def start(self, next_call: int, state: dict, ready: dict[int, Produced] | None = None,
              dropped=(), taken: int = 0, *, floor: int = 0) -> None:
        """Starts at `next_call` from the rollout's `state` after call next_call - 1, with
        `ready` the calls made but not taken (after `taken`), and `floor` the oldest
        version it can have (the learner's)."""
        self.stop()
        self.weights.reset()
        with self._cond:
            self._ready, self._error, self._stop = dict(ready or {}), None, False
            self._states = {next_call - 1: state}
            self.dropped, self.next_call, self.taken = set(dropped), next_call, taken
            self.floor, self.first_call = floor, next_call
        if self.threaded:
            self._thread = threading.Thread(target=self._run, name="rollout", daemon=True)
            self._thread.start()

    def _make_next(self) -> bool:
        """Makes (or skips, when dropped) the next call; False when there is none to
        make, it was stopped, or a call failed (the failure kept for `take`)."""
        with self._cond:
            call = self.next_call
            if self._stop or self._error is not None or call > self.last_call():
                return False
            dropped, version = call in self.dropped, self.version_of(call)
        try:
            with self.context():
                if dropped:
                    out = None
                    state = self.skip(call)
                else:
                    if not self.threaded and version not in self.weights.held():
                        raise RuntimeError(f"call {call} needs policy version {version}, "
                                           "which the learner has not published (held: "
                                           f"{self.weights.held()})")
                    params = self.weights.get(version)
                    self.weights.release(version)
                    started = time.perf_counter()
                    out = self.produce(call, params, version)
                    out.started, out.ended = started, time.perf_counter()
                    state = out.state
        except Stopped:
            return False
        except BaseException as e:  # noqa: BLE001 - the learner's take(call) raises it
            with self._cond:
                self._error = CallFailed(call, e)
                self._cond.notify_all()
            return False
        with self._cond:
            if self._stop:
                return False
            if out is not None:
                self._ready[call] = out
            self._states[call] = state
            self.next_call = call + 1
            self._cond.notify_all()
        return True

    def _run(self) -> None:
        while self._make_next():
            pass

    def pump(self, version: int) -> None:
        """The inline pipeline's calls that need no version newer than `version` (the
        learner's latest computed one): made now, while the learner's newest update may
        still run on its devices (JAX dispatches asynchronously). Threaded: nothing. A
        failure is kept for the `take` of the call that failed."""
        if self.threaded:
            return
        while (self.next_call <= self.last_call()
               and self.version_of(self.next_call) <= version and self._make_next()):
            pass

    def stop(self) -> None:
        """Stops the thread (a call in progress ends at its next segment boundary, or its
        end; nothing it makes is kept)."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self.weights.stop()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # -- the learner's side ---------------------------------------------------------------------
    def _wait(self, call: int) -> bool:
        """Blocks until call `call` is made (inline: makes the calls up to it); False when
        a call failed first."""
        def made() -> bool:
            return call in self._states or call in self._ready

        with self._cond:
            while not made():
                if self._error is not None:
                    return False
                if not self.threaded:
                    break
                if self._thread is None or not self._thread.is_alive():
                    raise RuntimeError(f"the rollout thread stopped before call {call}")
                self._cond.wait(timeout=1.0)
        while not made():
            if not self._make_next():
                return made()
        return True

    def take(self, call: int) -> Produced:
        """Call `call`'s output (blocks until it is there). Raises `CallFailed` when a call
        up to it failed: the learner's step fails with it and drops that call."""
        if not self._wait(call):
            raise self._error
        with self._cond:
            out = self._ready.pop(call)
            self.taken = call
            for c in [c for c in self._ready if c < call]:
                del self._ready[c]  # dropped calls' (none are made; kept to be sure)
            for c in [c for c in self._states if c < call]:
                del self._states[c]
        return out

    def version_of(self, call: int) -> int:
        """Call `call`'s version (`call_version`; the floor from the thread's first call)."""
        floor = self.floor if call >= self.first_call else 0
        return call_version(call, self.lag, self.dropped, floor)

    def next_to_take(self) -> int:
        """The call the learner's next step trains on: the first after the last taken
        that is not dropped."""
        with self._cond:
            call = self.taken + 1
            while call in self.dropped:
                call += 1
            return call

    def drop(self, call: int) -> None:
        """Batch `call` is not trained on (its step failed): not made (`skip`), and the
        later calls shift by one."""
        with self._cond:
            self.dropped.add(call)

    def through(self, version: int) -> int:
        """The last call whose policy version is at most `version` (the learner's version
        less one: every call the learner took is one)."""
        with self._cond:
            call = self.taken
            while call < self.last_call():
                made = self._ready.get(call + 1)
                if (made.version if made is not None else self.version_of(call + 1)) > version:
                    return call
                call += 1
            return call

    def capture(self, through: int) -> tuple[dict[int, Produced], dict, int]:
        """(the calls made after the learner's last take, up to `through`; the rollout's
        state after the last of them; that call), waiting for those calls. When a call
        failed first, what was made before it (the failure stays for `take`)."""
        self._wait(through)
        with self._cond:
            last = max(c for c in self._states if c <= through)
            ready = {c: p for c, p in self._ready.items() if self.taken < c <= last}
            return ready, self._states[last], last


class CallFailed(RuntimeError):
    """A rollout call failed (raised by the learner's `take` of it or of a later call)."""

    def __init__(self, call: int, error: BaseException):
        super().__init__(f"rollout call {call} failed: {type(error).__name__}: {error}")
        self.call = call
        self.__cause__ = error
