"""Shared pieces of the verifiers: the registry, the input error, tag extraction.

Every verifier registers itself in `VERIFIERS` as a function
`verify(completion: str, reference, *, <options>) -> float`. The options are
keyword-only so that `rl.registry.check_kwargs` can reject a misspelt one.

A verifier with work that needs a hard time limit (the `math` verifier's
library fallback) raises `Escalate` when it runs in the caller's process
(`IN_WORKER` False): `RewardSpec.submit` (`rl.rewards.spec`) then scores that
item in a worker process of `rl.rewards.pool`, where `IN_WORKER` is True and
the verifier does the work itself. `WARMERS` maps a verifier name to a hook a
worker runs at start-up (imports), so that no item's timeout pays for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rl.registry import Registry

Verifier = Callable[..., float]

VERIFIERS: Registry[Verifier] = Registry("verifier")
WARMERS: dict[str, Callable[[], None]] = {}
# verifier name -> check(**options): RewardInputError for a bad option value, so that
# a run's reward options are checked when its config is read (rl.rewards.RewardSpec)
OPTION_CHECKS: dict[str, Callable[..., object]] = {}
IN_WORKER = False  # set by rl.rewards.worker in the worker processes

_OPEN_TAG = "<answer>"
_CLOSE_TAG = "</answer>"


class RewardInputError(ValueError):
    """A bad reference or option: a bug in the data or the config, not the model.

    `rl.rewards.score` re-raises it (every other exception while scoring one
    completion gives that completion 0.0).
    """


class Escalate(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a verifier outside a worker: score this item in a worker process.

    `key` (hashable, optional): what the worker's score depends on, given the
    verifier's options (the `math` verifier's extracted answer and reference).
    Items of one batch that escalate with equal keys are scored once."""

    def __init__(self, key: object = None):
        super().__init__(key)
        self.key = key


def last_answer_tag(text: str) -> str | None:
    """The content of the last complete `<answer>...</answer>` pair, or None.

    Linear time: two `rfind`s, no regex, so no backtracking on long inputs.
    """
    close = text.rfind(_CLOSE_TAG)
    if close < 0:
        return None
    start = text.rfind(_OPEN_TAG, 0, close)
    if start < 0:
        return None
    return text[start + len(_OPEN_TAG):close]


def check_score_option(name: str, value: object) -> float:
    """`value` as a finite float, else RewardInputError naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RewardInputError(f"option {name!r} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise RewardInputError(f"option {name!r} must be finite, got {value!r}")
    return value
