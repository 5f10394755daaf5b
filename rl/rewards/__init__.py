"""Verifiers: reward functions for tasks with a checkable answer.

    rewards = rl.rewards.score("countdown", completions, references, require_all=True)

`score` looks the verifier up by name (`RegistryError` listing the names if
unknown), checks the options against its signature (`RegistryError` naming
an unknown one), and maps it over the batch, returning float32 `[N]`.

Registered verifiers (rules and options in `docs/rewards.md`):

* `countdown`  (`rl.rewards.countdown`)  reach a target with given numbers;
* `arithmetic` (`rl.rewards.arithmetic`) final number equals an exact answer;
* `math`       (`rl.rewards.math_verify`) boxed / "answer is" answer,
  string, numeric or sympy equivalence (time-limited, in a worker process);
* `format`     (`rl.rewards.format`) completion fullmatches a regex.

A verifier never raises because of a completion: any exception while scoring
one item gives that item 0.0 (the parsers are written not to raise in the
first place). A bad reference or option value is a data/config bug and
raises `RewardInputError` (a ValueError).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from rl.registry import check_kwargs
from rl.rewards import arithmetic, countdown, math_verify  # noqa: F401 - register
from rl.rewards import format as _format  # noqa: F401 - register
from rl.rewards.common import VERIFIERS, RewardInputError, Verifier

__all__ = ["VERIFIERS", "RewardInputError", "get", "names", "score"]

_log = logging.getLogger(__name__)


def names() -> list[str]:
    """The registered verifier names, sorted."""
    return VERIFIERS.names()


def get(name: str) -> Verifier:
    """The verifier `verify(completion, reference, **options) -> float` called `name`."""
    return VERIFIERS.get(name)


def _score_one(verify: Verifier, completion: object, reference: object,
               options: dict[str, Any]) -> float:
    if not isinstance(completion, str):
        return 0.0
    try:
        value = float(verify(completion, reference, **options))
    except RewardInputError:
        raise
    except Exception as err:  # noqa: BLE001 - a completion must never crash training
        _log.debug("verifier raised %r; scoring 0.0", err)
        return 0.0
    return value if math.isfinite(value) else 0.0


def score(name: str, completions: Sequence[str], references: Sequence[Any] | None,
          **kwargs: Any) -> np.ndarray:
    """Scores every completion against its reference with the verifier `name`.

    Args:
        name: a registered verifier (`names()`).
        completions: N completion strings (a non-str item scores 0.0).
        references: N references, or None for verifiers that ignore them.
        **kwargs: the verifier's options.

    Returns:
        float32 array [N].

    Raises:
        RegistryError: unknown verifier or option.
        ValueError: different numbers of completions and references.
        RewardInputError: a malformed reference or option value.
    """
    verify = VERIFIERS.get(name)
    check_kwargs("verifier", name, verify, kwargs, reserved=("completion", "reference"))
    completions = list(completions)
    references = [None] * len(completions) if references is None else list(references)
    if len(completions) != len(references):
        raise ValueError(f"{len(completions)} completions but {len(references)} references")
    scores = np.zeros(len(completions), dtype=np.float32)
    for i, (completion, reference) in enumerate(zip(completions, references, strict=True)):
        scores[i] = _score_one(verify, completion, reference, kwargs)
    return scores
