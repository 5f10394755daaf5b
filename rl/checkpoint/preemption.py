"""SIGTERM / SIGINT during training: finish (or abandon) the step, checkpoint, exit.

    with Watch(abandon_after_s=20, stream=sys.stderr) as watch:
        for step in ...:
            run_step()                    # may raise Abandoned
            if watch.requested:
                save(); raise Preempted(watch.requested, step, path)

The first signal only sets `requested`: the running step goes on and the
loop checkpoints at its end. A second signal, or `abandon_after_s` seconds
without the step ending, raises `Abandoned` in the main thread (at the next
Python instruction: a running XLA computation finishes first); the loop then
saves its last in-memory snapshot instead. Entry points turn `Preempted` into
exit status 0 for SIGTERM (the scheduler's "stop": a rerun resumes) and 130
for SIGINT.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Abandoned(BaseException):
    """The current step was given up after a preemption signal (BaseException: no
    `except Exception` in a step may swallow it)."""


class Preempted(Exception):
    """The run stopped on a signal after writing a checkpoint."""

    def __init__(self, signum: int, step: int, path: str):
        self.signum, self.step, self.path = signum, step, path
        name = signal.Signals(signum).name
        super().__init__(f"stopped on {name} with a checkpoint of step {step} in {path}; "
                         "rerun the same command to resume")

    @property
    def exit_code(self) -> int:
        return 130 if self.signum == signal.SIGINT else 0


class Watch:
    """Context manager that installs the handlers (main thread only; elsewhere a no-op)."""

    def __init__(self, abandon_after_s: float = 20.0, stream=None):
        self.abandon_after_s = abandon_after_s
        self.stream = stream or sys.stderr
        self.requested: int | None = None
        self._previous: dict[int, object] = {}
        self._timer: threading.Timer | None = None

    def _handler(self, signum, frame):
        del frame
        if self.requested is not None:
            raise Abandoned
        self.requested = signum
        print(f"\nreceived {signal.Signals(signum).name}: checkpointing at the end of this step "
              f"(abandoning it after {self.abandon_after_s:g}s, or on a second signal)",
              file=self.stream, flush=True)
        if self.abandon_after_s > 0:
            self._timer = threading.Timer(self.abandon_after_s, _thread.interrupt_main, (signum,))
            self._timer.daemon = True
            self._timer.start()

    def __enter__(self) -> Watch:
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
