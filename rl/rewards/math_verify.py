"""The `math` verifier: is the final answer equivalent to the reference answer?

Reference: a string (plain, LaTeX, or `\\boxed{...}`); ints, floats and
Fractions are accepted and converted with `str`. Extraction from the completion: the
content of the last `\\boxed{...}` / `\\fbox{...}` (brace-matched; if that
box is unclosed there is no answer), else the rest of the line after the last
"answer is" (case-insensitive; a leading ":" dropped; if it starts with "$",
the math up to the closing "$", else up to the first ". "; trailing ".", "$"
and spaces stripped), else no answer (0.0).

Both answers are split into elements if they are tuples/sets/lists
("(1, 2)", "[0, 1)", "\\{1,2\\}", "1, 2"; compared element-wise in order, the
delimiters must agree, "()" and bare lists are interchangeable). Each
element pair is then equivalent if:

a. their `latex.canonical` strings are equal; else
b. both evaluate to rational numbers (ints, decimals, `a/b`, `\\frac`,
   integer powers, + - * /): equal exactly, or within relative tolerance 1e-6
   if either is written with a decimal point. Decided here either way; else
c. (`use_sympy=True`) both convert (`latex.to_plain`) and parse as
   expressions with single-letter variables and known functions, pass the
   size guards, and sympy shows `simplify(a - b) == 0` (or, with a decimal
   literal, numerically equal within 1e-6) inside `timeout_s` in the worker
   process (`rl.rewards.sympy_worker`). A timeout scores 0.0.

Answers longer than 1000 characters score 0.0. A purely alphabetic answer of
two or more letters ("yes", "ABD") is compared as text only (not as a
product of variables).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from rl.rewards import latex
from rl.rewards.common import VERIFIERS, RewardInputError
from rl.rewards.expression import ExpressionError, Node, check_bounded, evaluate, parse
from rl.rewards.sympy_worker import WORKER

MAX_ANSWER_CHARS = 1000
MAX_ELEMENTS = 32
MAX_PLAIN_CHARS = 4000
REL_TOL = Fraction(1, 10**6)

_ANSWER_IS = re.compile(r"answer is", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z]{2,}")


def extract_answer(completion: str) -> str | None:
    """The completion's final answer text (see the module docstring), or None."""
    if re.search(r"\\(?:boxed|fbox)(?![A-Za-z])", completion):
        return latex.last_boxed(completion)
    last = None
    for last in _ANSWER_IS.finditer(completion):
        pass
    if last is None:
        return None
    line = completion[last.end():].split("\n", 1)[0]
    line = line.strip().lstrip(":").strip()
    if line.startswith("$"):  # "$...$" or "$$...$$": the math only
        body = line.lstrip("$")
        line = body[:body.find("$")] if "$" in body else body
    else:  # "5. Because ..." -> "5"
        line = line.split(". ", 1)[0]
    return line.rstrip(".$ \t").strip().strip("$").strip() or None


def _tree(text: str, *, symbolic: bool) -> Node | None:
    """The parsed expression of a cleaned answer element, or None."""
    try:
        plain = latex.to_plain(text)
        return parse(plain, allow_names=symbolic, allow_power=True, allow_implicit=True,
                     max_length=MAX_PLAIN_CHARS, max_depth=64)
    except (latex.LatexError, ExpressionError):
        return None


def _has_decimal(node: Node) -> bool:
    kind = node[0]
    if kind == "num":
        return bool(node[2])
    if kind == "name":
        return False
    if kind == "neg":
        return _has_decimal(node[1])
    if kind in ("sum", "prod"):
        return any(_has_decimal(child) for _, child in node[1])
    if kind == "pow":
        return _has_decimal(node[1]) or _has_decimal(node[2])
    return any(_has_decimal(arg) for arg in node[2])


def _numeric(tree: Node | None) -> Fraction | None:
    if tree is None:
        return None
    try:
        return evaluate(tree)
    except ExpressionError:
        return None


def _close(a: Fraction, b: Fraction, approximate: bool) -> bool:
    if a == b:
        return True
    return approximate and abs(a - b) <= REL_TOL * max(abs(a), abs(b))


def _compare(predicted: str, expected: str) -> bool | tuple[Node, Node, bool]:
    """True/False if decided by string or numeric equality, else the sympy job."""
    if latex.canonical(predicted) == latex.canonical(expected):
        return True
    numeric_a, numeric_b = _tree(predicted, symbolic=False), _tree(expected, symbolic=False)
    value_a, value_b = _numeric(numeric_a), _numeric(numeric_b)
    if value_a is not None and value_b is not None:
        approximate = _has_decimal(numeric_a) or _has_decimal(numeric_b)  # type: ignore[arg-type]
        return _close(value_a, value_b, approximate)
    if any(_WORD.fullmatch(latex.canonical(text)) for text in (predicted, expected)):
        return False
    tree_a, tree_b = _tree(predicted, symbolic=True), _tree(expected, symbolic=True)
    if tree_a is None or tree_b is None:
        return False
    try:
        check_bounded(tree_a)
        check_bounded(tree_b)
    except ExpressionError:
        return False
    return tree_a, tree_b, _has_decimal(tree_a) or _has_decimal(tree_b)


def _elements(text: str) -> tuple[str, list[str]]:
    split = latex.split_tuple(text)
    if split is None:
        return "", [text]
    delimiters, elements = split
    return ("" if delimiters == "()" else delimiters), elements


def equivalent(predicted: str, expected: str, *, timeout_s: float = 2.0,
               use_sympy: bool = True) -> bool:
    """True if the answer strings are equivalent (see the module docstring)."""
    if len(predicted) > MAX_ANSWER_CHARS or len(expected) > MAX_ANSWER_CHARS:
        return False
    predicted, expected = latex.clean(predicted), latex.clean(expected)
    if not predicted or not expected:
        return False
    if predicted.replace(" ", "") == expected.replace(" ", ""):
        return True
    kind_a, elements_a = _elements(predicted)
    kind_b, elements_b = _elements(expected)
    if kind_a != kind_b or len(elements_a) != len(elements_b) \
            or len(elements_a) > MAX_ELEMENTS:
        return False
    jobs: list[tuple[Node, Node]] = []
    approximate = False
    for a, b in zip(elements_a, elements_b, strict=True):
        decision = _compare(a, b)
        if decision is False:
            return False
        if decision is not True:
            tree_a, tree_b, has_decimal = decision
            jobs.append((tree_a, tree_b))
            approximate = approximate or has_decimal
    if not jobs:
        return True
    if not use_sympy:
        return False
    return WORKER.equal(jobs, approximate, timeout_s)


def _check_options(timeout_s: object, use_sympy: object) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise RewardInputError(f"option 'timeout_s' must be a number > 0, got {timeout_s!r}")
    if not isinstance(use_sympy, bool):
        raise RewardInputError(f"option 'use_sympy' must be a bool, got {use_sympy!r}")
    return float(timeout_s)


@VERIFIERS.register("math")
def verify(completion: str, reference: str, *, timeout_s: float = 2.0,
           use_sympy: bool = True) -> float:
    """Scores one math completion: 1.0 if its answer is equivalent, else 0.0."""
    timeout_s = _check_options(timeout_s, use_sympy)
    if isinstance(reference, (int, float, Fraction)) and not isinstance(reference, bool):
        reference = str(reference)
    if not isinstance(reference, str) or not reference.strip():
        raise RewardInputError(f"math reference must be a non-empty str, got {reference!r}")
    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    return 1.0 if equivalent(answer, reference, timeout_s=timeout_s,
                             use_sympy=use_sympy) else 0.0
