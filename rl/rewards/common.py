"""Shared pieces of the verifiers: the registry, the input error, tag extraction.

Every verifier registers itself in `VERIFIERS` as a function
`verify(completion: str, reference, *, <options>) -> float`. The options are
keyword-only so that `rl.registry.check_kwargs` can reject a misspelt one.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from rl.registry import Registry

Verifier = Callable[..., float]

VERIFIERS: Registry[Verifier] = Registry("verifier")

_OPEN_TAG = "<answer>"
_CLOSE_TAG = "</answer>"


class RewardInputError(ValueError):
    """A bad reference or option: a bug in the data or the config, not the model.

    `rl.rewards.score` re-raises it (every other exception while scoring one
    completion gives that completion 0.0).
    """


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
