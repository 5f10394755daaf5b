"""The `countdown` verifier: reach a target with the given numbers and + - * /.

Reference: `{"target": int, "numbers": list[int]}`. The candidate is the
content of the last `<answer>...</answer>` pair, else the last non-empty line.
It is either an expression (`(3 + 5) * 3`) or an equation with exactly one
"=" whose right side is a single (optionally signed) number equal to the
target (`(3 + 5) * 3 = 24`). Scoring:

* 1.0: the expression's exact value (fractions, no rounding) is the target,
  every literal is one of `numbers`, each given number used at most once
  (exactly once with `require_all=True`);
* `format_score`: it parsed, but the value, the right side or the numbers
  used are wrong;
* 0.0: nothing extracted, a parse error (including `^`/`**`, letters,
  implicit multiplication, unbalanced parentheses), more than one "=",
  division by zero, or an input over the length/depth limits.

A literal preceded directly by a unary minus may match a negative given
number (`-3` uses the number -3 if it is given, else 3).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from fractions import Fraction

from rl.rewards.common import (
    OPTION_CHECKS,
    VERIFIERS,
    RewardInputError,
    check_score_option,
    last_answer_tag,
)
from rl.rewards.expression import (
    ExpressionError,
    evaluate,
    literals,
    normalize_unicode,
    parse,
)

MAX_CANDIDATE_CHARS = 512
MAX_DEPTH = 64


def extract_candidate(completion: str) -> str | None:
    """The last `<answer>` content, else the last non-empty line; None if empty."""
    tagged = last_answer_tag(completion)
    if tagged is not None:
        return tagged.strip() or None
    end = len(completion)
    while end > 0:  # scan lines from the end without splitting a long text
        start = completion.rfind("\n", 0, end) + 1
        line = completion[start:end].strip()
        if line:
            return line
        end = start - 1
    return None


def _check_reference(reference: object) -> tuple[Fraction, list[Fraction]]:
    if not isinstance(reference, Mapping) or "target" not in reference \
            or "numbers" not in reference:
        raise RewardInputError(
            f"countdown reference must be a mapping with 'target' and 'numbers', "
            f"got {reference!r}")
    try:
        target = Fraction(reference["target"])
        numbers = [Fraction(n) for n in reference["numbers"]]
    except (TypeError, ValueError) as err:
        raise RewardInputError(f"countdown reference has a non-numeric entry: {err}") from None
    return target, numbers


def uses_allowed_numbers(used: list[tuple[Fraction, bool]], numbers: list[Fraction],
                         require_all: bool) -> bool:
    """Multiset check: every literal is a given number, each at most once.

    A negated literal `-v` may consume a given `-v` (preferred) or `v`.
    """
    available = Counter(numbers)
    # Plain literals first: they can only match their own value.
    for value, negated in sorted(used, key=lambda item: item[1]):
        if negated and available[-value] > 0:
            available[-value] -= 1
        elif available[value] > 0:
            available[value] -= 1
        else:
            return False
    return not require_all or sum(available.values()) == 0


def _split_equation(candidate: str) -> tuple[str, str | None] | None:
    parts = candidate.split("=")
    if len(parts) == 1:
        return candidate, None
    if len(parts) == 2:
        return parts[0], parts[1]
    return None


def _right_side(text: str) -> Fraction | None:
    """The right side as a signed number literal, else None."""
    try:
        tree = parse(text, max_length=MAX_CANDIDATE_CHARS, max_depth=2)
    except ExpressionError:
        return None
    if tree[0] == "neg" and tree[1][0] == "num":
        return -tree[1][1]
    return tree[1] if tree[0] == "num" else None


def check_options(*, require_all: bool = False, format_score: float = 0.0) -> float:
    """RewardInputError for a bad option value; returns `format_score` as a float."""
    if not isinstance(require_all, bool):
        raise RewardInputError(f"option 'require_all' must be a bool, got {require_all!r}")
    return check_score_option("format_score", format_score)


OPTION_CHECKS["countdown"] = check_options


@VERIFIERS.register("countdown")
def verify(completion: str, reference: Mapping, *, require_all: bool = False,
           format_score: float = 0.0) -> float:
    """Scores one countdown completion (see the module docstring)."""
    format_score = check_options(require_all=require_all, format_score=format_score)
    target, numbers = _check_reference(reference)
    candidate = extract_candidate(completion)
    if candidate is None or len(candidate) > MAX_CANDIDATE_CHARS:
        return 0.0
    sides = _split_equation(normalize_unicode(candidate))
    if sides is None:
        return 0.0
    left, right = sides
    try:
        tree = parse(left, max_length=MAX_CANDIDATE_CHARS, max_depth=MAX_DEPTH)
        value = evaluate(tree)
    except ExpressionError:  # includes DivisionByZero and TooLarge
        return 0.0
    if right is not None:
        stated = _right_side(right)
        if stated is None:
            return 0.0
        if stated != target:
            return format_score
    if value != target or not uses_allowed_numbers(literals(tree), numbers, require_all):
        return format_score
    return 1.0
