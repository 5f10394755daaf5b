"""Verifiers: reward functions for tasks with a checkable answer.

    rewards = rl.rewards.score("countdown", completions, references, require_all=True)
    spec = rl.rewards.RewardSpec.build("math:1.0,format:0.1", correct="math", workers=2)
    result = spec.score(completions, references)   # .total, .parts, .correct, .metrics()

`score` looks the verifier up by name (`RegistryError` listing the names if
unknown), checks the options against its signature (`RegistryError` naming
an unknown one) and the references and option values (`RewardInputError`),
then scores the batch, returning float32 `[N]`. `RewardSpec` (`rl.rewards.spec`)
is a run's reward: several weighted verifiers, the one that decides
correctness, the worker pool and the per-item timeout.

Registered verifiers (rules and options in `docs/rewards.md`):

* `countdown`  (`rl.rewards.countdown`)   reach a target with given numbers;
* `arithmetic` (`rl.rewards.arithmetic`)  final number equals an exact answer;
* `math`       (`rl.rewards.math_answer`) final answer (`rl.rewards.extract`)
  equivalent to the reference: a fast exact parser, then math-verify in a
  worker process for what it cannot settle;
* `format`     (`rl.rewards.format`)      completion fullmatches a regex.

A verifier never raises because of a completion: any exception while scoring
one item gives that item 0.0 (the parsers are written not to raise in the
first place). A bad reference or option value is a data/config bug and
raises `RewardInputError` (a ValueError) before anything is scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rl.rewards import arithmetic, countdown, math_answer  # noqa: F401 - register
from rl.rewards import format as _format  # noqa: F401 - register
from rl.rewards.common import VERIFIERS, RewardInputError, Verifier
from rl.rewards.spec import CORRECT, DEFAULT_TIMEOUT_S, Rewards, RewardSpec

__all__ = ["CORRECT", "VERIFIERS", "RewardInputError", "RewardSpec", "Rewards", "get",
           "names", "score"]


def names() -> list[str]:
    """The registered verifier names, sorted."""
    return VERIFIERS.names()


def get(name: str) -> Verifier:
    """The verifier `verify(completion, reference, **options) -> float` called `name`.

    Called directly it runs in this process: the `math` verifier raises
    `common.Escalate` for an answer only its library fallback can settle; use
    `score` or a `RewardSpec`, which send such items to a worker process."""
    return VERIFIERS.get(name)


def score(name: str, completions: Sequence[str], references: Sequence[Any] | None, *,
          workers: int = 0, timeout_s: float = DEFAULT_TIMEOUT_S, **kwargs: Any) -> np.ndarray:
    """Scores every completion against its reference with the verifier `name`.

    Args:
        name: a registered verifier (`names()`).
        completions: N completion strings (a non-str item scores 0.0).
        references: N references, or None for verifiers that ignore them.
        workers: worker processes for the items the verifier escalates (the `math`
            verifier's library fallback): 0 or 1 score them in one, N in N; every
            item is first scored in this process.
        timeout_s: the hard limit on one item's time in a worker (0.0 after it).
        **kwargs: the verifier's options.

    Returns:
        float32 array [N].

    Raises:
        RegistryError: unknown verifier or option.
        ValueError: different numbers of completions and references.
        RewardInputError: a malformed reference or option value.
    """
    if "," in name or ":" in name:
        raise ValueError(f"score() takes one verifier, got {name!r}: use RewardSpec.build")
    spec = RewardSpec.build(name, kwargs, workers=workers, timeout_s=timeout_s)
    return spec.score(completions, references).parts[name]
