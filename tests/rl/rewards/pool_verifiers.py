"""Verifiers that misbehave on purpose, for the worker-pool tests.

The completion says what to do: "sleep:S" sleeps S seconds then scores 1,
"loop:N" runs `sum(range(N))` (pure CPU, for benchmarks/rewards.py),
"spin" loops in C forever (no signal could stop it), "exit" kills the worker
process, "hog" allocates until the worker's memory limit stops it, "pid"
scores the worker's process id (to see which process scored), anything else
scores 1. `keyed` escalates with the reference as its key and then, in a
worker, does what the reference says (the same instructions).
"""

from __future__ import annotations

import os
import time

from rl.rewards import common
from rl.rewards.common import VERIFIERS


@VERIFIERS.register("misbehave")
def misbehave(completion: str, reference: object = None) -> float:
    if completion.startswith("sleep:"):
        time.sleep(float(completion.split(":", 1)[1]))
    elif completion.startswith("loop:"):
        sum(range(int(completion.split(":", 1)[1])))
    elif completion == "spin":
        sum(range(10**13))  # one C call: minutes, uninterruptible from Python
    elif completion == "exit":
        os._exit(3)
    elif completion == "hog":
        hoard = []
        while True:
            hoard.append(bytearray(1 << 28))
    elif completion == "pid":
        return float(os.getpid())
    return 1.0


@VERIFIERS.register("keyed")
def keyed(completion: str, reference: str) -> float:
    """Scored in a worker as `misbehave(reference)`; equal references: equal keys."""
    if not common.IN_WORKER:
        raise common.Escalate(reference)
    return misbehave(reference)
