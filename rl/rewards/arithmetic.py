"""The `arithmetic` verifier: the final number must equal the exact answer.

Reference: an int, a `Fraction` (any `numbers.Rational`), a float (taken by
its shortest repr, 0.1 -> 1/10), or a string such as "-42", "3/4", "0.5",
"1,234". Extraction from the completion:

* if it has an `<answer>...</answer>` pair, the last one's content: the whole
  content as a number (after stripping whitespace, `$` and a trailing "."),
  else the last number inside it;
* otherwise the last number anywhere in the text.

A number is an integer, a decimal, or a simple fraction `a/b`, optionally
with thousands commas ("1,234,567") and a minus sign (ASCII or unicode)
directly in front that does not follow a digit, letter or closing bracket
("3-5" ends in 5, "x=-5" in -5). Only ASCII digits count (full-width digits
are mapped to ASCII; other unicode digits are not numbers). Values compare
exactly as fractions: "0.5" == "1/2", "007" == 7. Scoring: 1.0 equal,
`format_score` if a number was extracted but differs, 0.0 if none was.
"""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction

from rl.rewards.common import (
    OPTION_CHECKS,
    VERIFIERS,
    RewardInputError,
    check_score_option,
    last_answer_tag,
)
from rl.rewards.expression import MAX_LITERAL_CHARS, normalize_unicode

_INT = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)"
_UNSIGNED = rf"(?:{_INT}(?:\.[0-9]+)?|\.[0-9]+)(?:/{_INT})?"
_NUMBER = re.compile(rf"(?<![0-9.]){_UNSIGNED}(?![0-9])")
_WHOLE = re.compile(rf"[-+]?\s*{_UNSIGNED}")
_NOT_BEFORE_SIGN = frozenset("0123456789.)]}_") | frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def to_fraction(text: str) -> Fraction | None:
    """An unsigned number literal ("1,234", "0.5", "3/4") as a Fraction, or None."""
    text = text.replace(",", "")
    if len(text) > MAX_LITERAL_CHARS:
        return None
    numerator, _, denominator = text.partition("/")
    value = Fraction(numerator)
    if not denominator:
        return value
    divisor = Fraction(denominator)
    return value / divisor if divisor != 0 else None


def parse_whole(text: str) -> Fraction | None:
    """`text` as one signed number ("-3/4", " $1,234$. "), or None."""
    if len(text) > 2 * MAX_LITERAL_CHARS:
        return None
    text = normalize_unicode(text)
    previous = None
    while text != previous:
        previous, text = text, text.strip().strip("$").rstrip(".")
    if not _WHOLE.fullmatch(text):
        return None
    negative = text.startswith("-")
    value = to_fraction(text.lstrip("+-").strip())
    if value is None:
        return None
    return -value if negative else value


def last_number(text: str) -> Fraction | None:
    """The last number in `text` (see the module docstring), or None."""
    text = normalize_unicode(text)
    match = None
    for match in _NUMBER.finditer(text):
        pass
    if match is None:
        return None
    value = to_fraction(match.group())
    if value is None:
        return None
    start = match.start()
    if start >= 1 and text[start - 1] == "-" and (
            start < 2 or text[start - 2] not in _NOT_BEFORE_SIGN):
        value = -value
    return value


def extract_answer(completion: str) -> Fraction | None:
    """The completion's answer as a Fraction, or None if there is none."""
    tagged = last_answer_tag(completion)
    if tagged is None:
        return last_number(completion)
    whole = parse_whole(tagged)
    return whole if whole is not None else last_number(tagged)


def reference_value(reference: object) -> Fraction:
    """The reference as a Fraction; RewardInputError if it is not a number."""
    if isinstance(reference, bool):
        raise RewardInputError(f"arithmetic reference must be a number, got {reference!r}")
    if isinstance(reference, numbers.Rational):
        return Fraction(reference.numerator, reference.denominator)
    if isinstance(reference, float) and math.isfinite(reference):
        return Fraction(repr(reference))
    if isinstance(reference, str):
        value = parse_whole(reference)
        if value is not None:
            return value
    raise RewardInputError(f"arithmetic reference is not a number: {reference!r}")


def check_options(*, format_score: float = 0.0) -> float:
    """RewardInputError for a bad option value; returns `format_score` as a float."""
    return check_score_option("format_score", format_score)


OPTION_CHECKS["arithmetic"] = check_options


@VERIFIERS.register("arithmetic")
def verify(completion: str, reference: int | str | Fraction, *,
           format_score: float = 0.0) -> float:
    """Scores one arithmetic completion (see the module docstring)."""
    format_score = check_score_option("format_score", format_score)
    expected = reference_value(reference)
    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    return 1.0 if answer == expected else format_score
