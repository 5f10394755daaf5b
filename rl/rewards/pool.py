"""A pool of killable verifier processes: parallel scoring with hard per-item timeouts.

    pool = Pool(2, warm=("math",))
    pending = pool.submit(items, timeout_s=5.0)   # returns at once; workers start scoring
    ...                                             # the trainer dispatches device work
    result = pending.result()                       # scores [N], timed_out [N], crashed [N]

An item is `(verifier name, completion, reference, options)`. Each worker is a
fresh interpreter (`python -P -m rl.rewards.worker FD`, fork+exec through
`subprocess`: never a bare fork of a process that runs JAX threads, and
never a re-import of the parent's `__main__` as multiprocessing's "spawn"
does) that imports `rl.rewards` (numpy and the verifiers; not JAX) and talks
over a socket pair. A worker has an address-space limit (`memory_limit`) and
exits when the parent's end of its socket closes.

Scheduling: items that share a reference are kept together (a prompt's
samples go to one worker, whose parse caches then serve them all). While a
batch is open (`open`, then `add` as the caller finds items to send) every
worker is kept fed with a few items, so the workers start at once; `close`
sends every worker an equal share of half of what is left, so they go on
while the caller does something else; `result()` deals the rest in small
chunks to whichever worker runs low, so a worker that drew slow items does not
hold up the batch. A worker reports each item with
`time.monotonic()` stamps (system-wide on Linux, so comparable across
processes). An item's time runs
from the end of the worker's previous item (or the worker's receipt of the
batch), so the timeout is enforced exactly even when the caller collects the
results late:

* an item whose own time exceeds `timeout_s` scores 0.0 and counts as a timeout,
  whether it finished late or is still running;
* a worker still running an item past its deadline is killed (SIGKILL, which
  also stops C-level loops in sympy), restarted, and sent the rest of its share;
* a worker that dies on an item (out of memory, a crash) is restarted the
  same way; the item scores 0.0 and counts as a crash.

Nothing here uses signals or threads in the caller (each calling thread gets its own
shared pool, `shared`). POSIX only (socket fd
inheritance). Worker start-up (imports, `warm` hooks) is not counted against
any item's timeout.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np

STARTUP_TIMEOUT_S = 120.0
MEMORY_LIMIT_BYTES = 4 << 30
MAX_FAILED_STARTS = 3
FEED = 4  # items kept queued per worker while a batch is still being added to
CHUNKS_PER_WORKER = 32  # the dynamically dealt half of a batch goes out in chunks this fine

Item = tuple[str, Any, Any, dict]

_log = logging.getLogger(__name__)


class PoolError(RuntimeError):
    """A worker could not be started (after `MAX_FAILED_STARTS` attempts)."""


@dataclasses.dataclass
class PoolResult:
    """Per item: `scores` float32 [N]; `timed_out`, `crashed` bool [N] (those score 0)."""
    scores: np.ndarray
    timed_out: np.ndarray
    crashed: np.ndarray


class _Worker:
    """One child process and the indices of the items it still owes."""

    def __init__(self, warm: tuple[str, ...], imports: tuple[str, ...], memory_limit: int):
        self.warm, self.imports, self.memory_limit = warm, imports, memory_limit
        self.process: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.queue: collections.deque[int] = collections.deque()
        self.since = 0.0  # monotonic start of the item at the head of `queue`

    def start(self) -> None:
        for attempt in range(1, MAX_FAILED_STARTS + 1):
            parent, child = socket.socketpair()
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
            try:
                self.process = subprocess.Popen(
                    [sys.executable, "-P", "-m", "rl.rewards.worker", str(child.fileno()),
                     str(self.memory_limit), ",".join(self.warm), ",".join(self.imports)],
                    pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL,
                    close_fds=True)
            finally:
                child.close()
            self.conn = Connection(parent.detach())
            try:
                if self.conn.poll(STARTUP_TIMEOUT_S) and self.conn.recv() == "ready":
                    return
            except (EOFError, OSError):
                pass
            _log.warning("verifier worker did not start (attempt %d)", attempt)
            self.stop()
        raise PoolError(f"a verifier worker failed to start {MAX_FAILED_STARTS} times "
                        f"(python -m rl.rewards.worker; warm={list(self.warm)})")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, graceful: bool = False) -> None:
        process, conn = self.process, self.conn
        self.process, self.conn = None, None
        if process is None:
            return
        if graceful and conn is not None:
            try:
                conn.send(None)
                process.wait(1.0)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if process.poll() is None:
            process.kill()
        try:
            process.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
        if conn is not None:
            conn.close()


def _grouped(items: list[Item]) -> list[int]:
    """Item indices with the items that share a verifier and reference next to each other
    (in order of first appearance), so one worker tends to get all of a prompt's samples
    and its parse caches (math-verify's, for the reference) serve them all."""
    first: dict[tuple[str, str], int] = {}
    keys = []
    for i, (name, _, reference, _) in enumerate(items):
        keys.append(first.setdefault((name, repr(reference)), i))
    return sorted(range(len(items)), key=lambda i: (keys[i], i))


class Pending:
    """A batch: `add` items while it is open, `close()` it, then `result()` (once)."""

    def __init__(self, pool: Pool, timeout_s: float):
        self._pool, self._timeout = pool, timeout_s
        self._items: list[Item] = []
        self._scores: list[float] = []
        self._timed_out: list[bool] = []
        self._crashed: list[bool] = []
        self._left = 0
        self._result: PoolResult | None = None
        self._backlog: collections.deque[int] = collections.deque()
        self._chunk = 1

    def add(self, items: Sequence[Item]) -> None:
        """Queues more items; a worker with less than FEED items queued gets some at once
        (so the workers start while the caller is still finding items to send)."""
        start, n = len(self._items), len(items)
        self._items.extend(items)
        self._scores.extend([0.0] * n)
        self._timed_out.extend([False] * n)
        self._crashed.extend([False] * n)
        self._left += n
        self._backlog.extend(start + i for i in _grouped(list(items)))
        for worker in self._pool._workers:
            if worker.queue:
                self._drain(worker)
            if len(worker.queue) < FEED:
                self._deal(worker, FEED - len(worker.queue))

    def close(self) -> Pending:
        """No more items: half of those not yet sent go out at once (scored while the caller
        is away), the rest in chunks from `result()` to whichever worker runs low."""
        size = len(self._pool._workers)
        self._chunk = max(1, -(-len(self._backlog) // (size * CHUNKS_PER_WORKER)))
        share = -(-len(self._backlog) // (2 * size))
        for worker in self._pool._workers:
            self._deal(worker, share)
        return self

    # -- bookkeeping ---------------------------------------------------------------------
    def _send(self, worker: _Worker, indices: list[int]) -> None:
        """Appends `indices` to the worker's queue and sends them (a batch message)."""
        if not indices:
            return
        if not worker.alive:
            worker.stop()
            worker.start()
        assert worker.conn is not None
        if not worker.queue:  # idle: its next item starts now (refined by its "start" stamp)
            worker.since = time.monotonic()
        worker.queue.extend(indices)
        worker.conn.send([(i, *self._items[i]) for i in indices])

    def _deal(self, worker: _Worker, count: int) -> None:
        """Sends the worker up to `count` items from the backlog."""
        take = min(count, len(self._backlog))
        self._send(worker, [self._backlog.popleft() for _ in range(take)])

    def _finish(self, worker: _Worker, score: float, *, timed_out=False, crashed=False):
        index = worker.queue.popleft()
        self._scores[index] = 0.0 if (timed_out or crashed) else score
        self._timed_out[index], self._crashed[index] = timed_out, crashed
        self._left -= 1

    def _restart(self, worker: _Worker) -> None:
        owed = list(worker.queue)
        worker.queue.clear()
        worker.stop()
        self._send(worker, owed)

    def _drain(self, worker: _Worker) -> None:
        """Reads every message the worker has sent so far."""
        assert worker.conn is not None
        try:
            while worker.queue and worker.conn.poll(0):
                message = worker.conn.recv()
                if message[0] == "start":
                    worker.since = message[1]
                    continue
                _, index, score, done = message
                if not worker.queue or worker.queue[0] != index:
                    raise RuntimeError(f"worker answered item {index} out of order")
                took = done - worker.since
                worker.since = done
                self._finish(worker, score, timed_out=took > self._timeout)
        except (EOFError, OSError):  # died on the item at the head of its queue
            self._pool.crashes += 1
            _log.warning("verifier worker died; restarting it")
            self._finish(worker, 0.0, crashed=True)
            self._restart(worker)

    def result(self) -> PoolResult:
        if self._result is not None:
            return self._result
        workers = self._pool._workers
        while self._left:
            for worker in workers:  # the other half in chunks, to whoever runs low
                if worker.queue:
                    self._drain(worker)
                if len(worker.queue) < 2 * self._chunk and self._backlog:  # never idle
                    self._deal(worker, 2 * self._chunk - len(worker.queue))
            now = time.monotonic()
            for worker in workers:
                if worker.queue and now - worker.since > self._timeout:
                    _log.debug("verifier item timed out after %.3gs; killing its worker",
                               self._timeout)
                    self._finish(worker, 0.0, timed_out=True)
                    self._restart(worker)
            busy = [w for w in workers if w.queue]
            if busy:
                deadline = min(w.since for w in busy) + self._timeout
                wait([w.conn for w in busy], timeout=max(0.0, deadline - time.monotonic()))
        self._result = PoolResult(np.asarray(self._scores, np.float32),
                                  np.asarray(self._timed_out, bool),
                                  np.asarray(self._crashed, bool))
        self._pool._pending = None
        return self._result


class Pool:
    """`workers` verifier processes, started on first use. `warm`: verifier names whose
    warm-up hook each worker runs at start (e.g. "math" imports math-verify);
    `imports`: modules a worker imports to register verifiers defined outside
    `rl.rewards`."""

    def __init__(self, workers: int, *, warm: Sequence[str] = (), imports: Sequence[str] = (),
                 memory_limit: int = MEMORY_LIMIT_BYTES):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"a verifier pool needs workers >= 1, got {workers!r}")
        self.size = workers
        self._warm, self._imports = tuple(warm), tuple(imports)
        self._memory_limit = memory_limit
        self._workers: list[_Worker] = []
        self._owner = os.getpid()
        self._pending: Pending | None = None
        self.crashes = 0

    def _ready(self) -> list[_Worker]:
        if self._owner != os.getpid():  # inherited through fork: the workers are the parent's
            self._workers, self._owner, self._pending = [], os.getpid(), None
        if not self._workers:
            self._workers = [_Worker(self._warm, self._imports, self._memory_limit)
                             for _ in range(self.size)]
        for worker in self._workers:
            if not worker.alive:
                worker.stop()
                worker.start()
        return self._workers

    def open(self, timeout_s: float) -> Pending:
        """An empty batch to `add` items to (a batch still pending is collected first)."""
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        if self._pending is not None:
            self._pending.result()
        self._ready()
        self._pending = Pending(self, float(timeout_s))
        return self._pending

    def submit(self, items: Sequence[Item], timeout_s: float) -> Pending:
        """Starts scoring `items` (`open`, `add`, `close`)."""
        pending = self.open(timeout_s)
        pending.add(items)
        return pending.close()

    def run(self, items: Sequence[Item], timeout_s: float) -> PoolResult:
        return self.submit(items, timeout_s).result()

    def pids(self) -> list[int]:
        """The live workers' process ids (for tests and diagnostics)."""
        return [w.process.pid for w in self._workers if w.alive and w.process is not None]

    def close(self) -> None:
        if self._owner == os.getpid():
            for worker in self._workers:
                worker.stop(graceful=True)
        self._workers, self._pending = [], None


_SHARED: dict[tuple, Pool] = {}
_SHARED_LOCK = threading.Lock()


def shared(workers: int, warm: Sequence[str] = (), imports: Sequence[str] = ()) -> Pool:
    """The pool of `workers` workers with these warm hooks and imports, one per calling
    thread's name: a pool serves one batch at a time, and asynchronous rollouts score in
    their own thread ("rollout") while the trainer's thread evaluates."""
    key = (threading.current_thread().name, workers, tuple(sorted(set(warm))),
           tuple(sorted(set(imports))))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = Pool(workers, warm=key[2], imports=key[3])
        return _SHARED[key]


@atexit.register
def close_all() -> None:
    """Stops every shared pool's workers."""
    for pool in _SHARED.values():
        pool.close()
    _SHARED.clear()
