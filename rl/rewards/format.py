"""The `format` verifier: 1.0 if the completion has the required shape, else 0.0.

The completion is stripped and matched with `re.fullmatch(pattern, text,
re.DOTALL)`. The default pattern accepts exactly one `<answer>...</answer>`
whose content has a non-whitespace character, optionally preceded by one
`<think>...</think>` block, with only whitespace around and between them; no
`<think>`/`<answer>` tags may appear inside either block. It is written so
that matching is linear in the input length (each loop can only stop at a
tag). Inputs longer than `max_chars` (20,000) score 0.0 without matching, which
bounds the cost of a user pattern with catastrophic backtracking too.
References are ignored (they may be None).
"""

from __future__ import annotations

import functools
import re

from rl.rewards.common import OPTION_CHECKS, VERIFIERS, RewardInputError

MAX_CHARS = 20_000

_NO_TAG = r"(?:(?!</?(?:think|answer)>).)"
DEFAULT_PATTERN = (
    rf"(?:<think>{_NO_TAG}*</think>\s*)?"
    rf"<answer>\s*(?!</?(?:think|answer)>)\S{_NO_TAG}*</answer>"
)


@functools.lru_cache(maxsize=64)
def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error as err:
        raise RewardInputError(f"format pattern {pattern!r} is not a valid regex: {err}") from None


def check_options(*, pattern: str = DEFAULT_PATTERN, max_chars: int = MAX_CHARS
                  ) -> re.Pattern[str]:
    """RewardInputError for a bad option value; returns the compiled pattern."""
    if not isinstance(pattern, str):
        raise RewardInputError(f"option 'pattern' must be a str, got {pattern!r}")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 0:
        raise RewardInputError(f"option 'max_chars' must be an int >= 0, got {max_chars!r}")
    return _compile(pattern)


OPTION_CHECKS["format"] = check_options


@VERIFIERS.register("format")
def verify(completion: str, reference: object = None, *, pattern: str = DEFAULT_PATTERN,
           max_chars: int = MAX_CHARS) -> float:
    """1.0 if the stripped completion fully matches `pattern`, else 0.0."""
    compiled = check_options(pattern=pattern, max_chars=max_chars)
    if not isinstance(completion, str) or len(completion) > max_chars:
        return 0.0
    return 1.0 if compiled.fullmatch(completion.strip()) else 0.0
