"""The verifier worker process of `rl.rewards.pool` (run as `python -P -m rl.rewards.worker`).

    python -P -m rl.rewards.worker FD MEMORY_LIMIT WARM IMPORTS

It sets its address-space limit, imports `rl.rewards` and the modules in
IMPORTS (comma-separated: where verifiers registered outside `rl.rewards`
live), runs the warm-up hook of each verifier named in WARM (comma-separated,
`common.WARMERS`), says "ready", then serves
batches until the parent closes its socket or sends None. A batch is a list of
`(index, verifier, completion, reference, options)`; for each item it sends
`("done", index, score, monotonic time)` as soon as the item is scored, after a
`("start", monotonic time)` for the batch. Scoring is `rl.rewards.spec.call`:
a verifier's exception gives 0.0 (a `RewardInputError` too: the parent has
already checked references and options before submitting).
"""

from __future__ import annotations

import importlib
import sys
import time
from multiprocessing.connection import Connection

from rl import rewards
from rl.rewards import common
from rl.rewards.spec import call


def _limit_memory(limit: int) -> None:
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass


def serve(fd: int, memory_limit: int, warm: list[str], imports: list[str]) -> None:
    conn = Connection(fd)
    _limit_memory(memory_limit)

    common.IN_WORKER = True
    for module in imports:
        importlib.import_module(module)
    for name in warm:
        hook = common.WARMERS.get(name)
        if hook is not None:
            hook()
    conn.send("ready")
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            return
        if batch is None:
            return
        conn.send(("start", time.monotonic()))
        for index, name, completion, reference, options in batch:
            try:
                score = call(rewards.get(name), completion, reference, options)
            except Exception:  # noqa: BLE001 - a RewardInputError here is the parent's to raise
                score = 0.0
            conn.send(("done", index, score, time.monotonic()))


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), [w for w in sys.argv[3].split(",") if w],
          [m for m in sys.argv[4].split(",") if m])
