"""The `math` verifier: is the completion's final answer equivalent to the reference?

Two stages, so that each answer is settled by whichever is right for it:

1. **The fast exact parser** (this file, `latex`, `expression`), in the
   calling process, microseconds per item. It settles an answer when it can be
   sure: equal normalised strings; numbers (integers, decimals, fractions, mixed
   numbers, `\\frac`, powers, `\\times 10^{n}`, `n!`, `\\binom{n}{k}`, percent,
   currency, thousands separators, units words) compared exactly (within a
   relative 1e-6 when a decimal is involved); lists of them (solution lists and
   sets unordered, `\\pm` expanded, "or" as a separator; tuples and intervals in
   order, brackets compared). It rejects, before anything is computed, answers
   over 1,000 characters, NUL bytes, TeX macro definitions and file or shell
   primitives (`\\def`, `\\newcommand`, `\\input`, `\\write`...), code (`__`,
   `import`, calls of eval/exec/system...) and numbers too large to build (`9^{9^{9^9}}`).
2. **math-verify** (the library TRL, open-r1 and verl recipes use; latex2sympy
   and sympy) for what the parser cannot settle: symbolic expressions,
   radicals and π, equations, intervals and unions, matrices, text answers.
   It runs only in a worker process of `rl.rewards.pool`, under a hard,
   killable per-item timeout (no `signal.alarm`; its own timeouts are off).
   Called in the caller's process, this verifier raises `common.Escalate` for
   such an item and `RewardSpec.submit` sends it to a worker.

The answer is found by `rl.rewards.extract` (`answer_formats`, `search`); a
truncated (unclosed box, cut-off `<think>`/`<answer>`) or hedged (boxes that
disagree) answer is no answer. Options: `answer_formats`, `search`,
`fallback=True` (False: stage 1 alone, anything it cannot settle scores 0).
"""

from __future__ import annotations

import functools
import logging
import re
from fractions import Fraction

from rl.rewards import answer_values as av
from rl.rewards import common, extract, identity, latex
from rl.rewards.common import VERIFIERS, RewardInputError
from rl.rewards.expression import TooLarge

_FORBIDDEN = re.compile(
    r"\\(?:[egx]?def|let|(?:re)?newcommand|providecommand|newenvironment|DeclareMathOperator"
    r"|input|include|write|openin|openout|read|catcode|csname|expandafter|immediate|usepackage"
    r"|special|directlua)(?![A-Za-z])|__|\bimport\b|\b(?:eval|exec|system|compile|open)\s*\(")

_WORD = re.compile(r"[A-Za-z]{2,}")
_CHOICE = re.compile(r"\(?([A-Ea-e])\)?\.?")
_ASSIGNED = re.compile(r"\s*([A-Za-z])\s*=(?!=)")
_HEDGES = re.compile(r"\b(?:possibly|maybe|probably|perhaps|either|might)\b", re.IGNORECASE)

_log = logging.getLogger(__name__)


MEMO_SIZE = 1 << 14  # (answer, reference) verdicts remembered per process, each stage


@functools.lru_cache(maxsize=MEMO_SIZE)
def judge(answer: str, reference: str) -> bool | None:
    """Stage 1: True/False when the fast parser is sure, None to ask the library.

    Memoised: a prompt's samples share its reference and often reach the same
    answer (580 distinct pairs among the benchmark's 1,024 completions)."""
    if len(answer) > av.MAX_ANSWER_CHARS or "\x00" in answer or _FORBIDDEN.search(answer):
        return False
    if _HEDGES.search(answer) and not _HEDGES.search(reference):
        return False
    named_a, named_b = _ASSIGNED.match(answer), _ASSIGNED.match(reference)
    if named_a and named_b and named_a.group(1) != named_b.group(1) \
            and answer.count("=") == reference.count("=") == 1:
        return False  # "y = 4" does not answer "x = 4"
    if "\\begin{" in answer and "\\begin{" in reference:
        decision = identity.matrix_equal(answer, reference)
        if decision is not None:
            return decision
    if answer.count("=") == reference.count("=") == 1 and "," not in answer + reference:
        decision = identity.equation_equal(*(
            "=".join(latex.clean(side) for side in av.unicode(t).split("="))
            for t in (answer, reference)))
        if decision is not None:  # before `normalize` drops a leading "y ="
            return decision
    pred, gold = _normalized(answer), _normalized(reference)
    if not pred or not gold:
        return False
    if pred.replace(" ", "") == gold.replace(" ", "") \
            or pred.isalpha() and pred.lower() == gold.lower():
        return True
    choice_a, choice_b = _CHOICE.fullmatch(pred), _CHOICE.fullmatch(gold)
    if choice_a and choice_b and (pred.startswith("(") or gold.startswith("(")
                                  or pred.isupper() and gold.isupper()):
        return choice_a.group(1).upper() == choice_b.group(1).upper()
    try:
        (kind_a, elements_a, values_a), (kind_b, elements_b, values_b) = \
            _parts(pred), _parts(gold)
    except TooLarge:  # a number too large to build: never a right answer
        return False
    if max(len(elements_a), len(elements_b)) > av.MAX_ELEMENTS:
        return False
    canon_a = sorted(e.replace(" ", "") for e in elements_a)
    canon_b = sorted(e.replace(" ", "") for e in elements_b)
    if values_a is not None and values_b is not None:
        if kind_a == kind_b == "one":
            return av.same(values_a[0], values_b[0])
        if kind_a == kind_b == "unordered":
            return av.match_unordered(values_a, values_b)
        if kind_a == kind_b:
            return len(values_a) == len(values_b) and all(
                av.same(a, b) for a, b in zip(values_a, values_b, strict=True))
        if "one" in (kind_a, kind_b):  # a number against a list of numbers
            return False
        if kind_a.startswith("ordered") and kind_b.startswith("ordered"):
            return False  # other brackets: [0, 1) is not (0, 1]
        return None  # a tuple against a set/list: the library knows the conventions
    if kind_a == kind_b == "unordered" and canon_a == canon_b:
        return True
    if av.unbounded(pred):
        return False
    if any(_WORD.fullmatch(t) and t.lower() not in av.MATH_WORDS and (len(t) > 2 or t.isupper())
           for t in (pred, gold)):
        return pred.lower() == gold.lower()  # words are text ("ABD" is not A*B*D; "ab" is)
    if kind_a == kind_b == "one" and ("=" in pred) == ("=" in gold):
        decision = (identity.equation_equal if "=" in pred else identity.expression_equal)(
            pred, gold)
        if decision is not None:
            return decision
    if kind_a == kind_b and kind_a != "unordered" and len(elements_a) == len(elements_b) \
            and identity.constants_differ(elements_a, elements_b):
        return False  # e.g. 2\sqrt{3} against \sqrt{13}: numerically apart
    return None


@functools.lru_cache(maxsize=MEMO_SIZE)
def _normalized(text: str) -> str:
    return av.normalize(text)


@functools.lru_cache(maxsize=MEMO_SIZE)
def _parts(text: str) -> tuple[str, tuple[str, ...], tuple | None]:
    """(kind, elements, their exact values or None) of a normalised answer; memoised, as
    the reference is the same for a prompt's samples. TooLarge for a huge number."""
    kind, elements = av.split(text)
    values = av.values(elements) if len(elements) <= av.MAX_ELEMENTS else None
    return kind, tuple(elements), None if values is None else tuple(values)


def forget() -> None:
    """Clears every memoised verdict and parse of this process (for benchmarks)."""
    for memo in (judge, _normalized, _parts, library_equal):
        memo.cache_clear()


# -- stage 2: math-verify, in a worker -------------------------------------------------------
def _quiet() -> None:
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.ERROR)


@functools.lru_cache(maxsize=MEMO_SIZE)
def library_equal(answer: str, reference: str) -> bool:
    """math-verify's verdict on two answer strings (no signal timeouts: call in a worker).
    Memoised like `judge` (a worker gets a prompt's samples together)."""
    import math_verify
    _quiet()
    gold = math_verify.parse(f"\\boxed{{{av.unicode(reference)}}}", parsing_timeout=None)
    pred = math_verify.parse(f"\\boxed{{{av.unicode(answer)}}}", parsing_timeout=None)
    if not gold or not pred:
        return False
    return bool(math_verify.verify(gold, pred, timeout_seconds=None))


# One pair per answer shape the library settles (radicals, pi, intervals and unions, plus-
# minus lists, matrices, equations, functions, text): parsing them once at start-up fills
# ANTLR's parser caches, so a fresh worker's first items cost what later ones do.
_WARM_PAIRS = (("x^2+2x+1", "(x+1)^2"), ("\\frac{\\sqrt{6}}{3}", "\\sqrt{\\frac{2}{3}}"),
               ("3\\pi/4", "\\frac{3\\pi}{4}"), ("(-\\infty, 0] \\cup (1, 2)", "[1, 2)"),
               ("2 \\pm \\sqrt{5}", "2+\\sqrt{5}, 2-\\sqrt{5}"), ("\\{1, 3\\}", "3, 1"),
               ("\\begin{pmatrix} 1 \\\\ \\sqrt{9} \\end{pmatrix}",
                "\\begin{bmatrix} 1 \\\\ 3 \\end{bmatrix}"), ("y = 2x - 1", "2x - y = 1"),
               ("e^{2x}\\sin x", "\\sin(x) e^{2x}"), ("\\dbinom{6}{2}", "\\text{fifteen}"),
               ("\\log_2 8 + 3i", "3 + 3i"), ("\\mathbb{R}", "(-\\infty, \\infty)"))


def warm() -> None:
    """Imports math-verify and runs it on `_WARM_PAIRS` (a worker's start-up, not an item's
    time), then forgets those verdicts."""
    for answer, reference in _WARM_PAIRS:
        library_equal(answer, reference)
    forget()


common.WARMERS["math"] = warm


# -- the verifier --------------------------------------------------------------------------------
def check_options(*, answer_formats: object = extract.DEFAULT_FORMATS,
                  search: object = "after_think", fallback: object = True) -> tuple:
    """RewardInputError for a bad option value; returns the answer formats."""
    formats = extract.parse_formats(answer_formats)  # type: ignore[arg-type]
    extract.check_search(search)
    if not isinstance(fallback, bool):
        raise RewardInputError(f"option 'fallback' must be a bool, got {fallback!r}")
    return formats


common.OPTION_CHECKS["math"] = check_options


@VERIFIERS.register("math")
def verify(completion: str, reference: str, *, answer_formats: str = extract.DEFAULT_FORMATS,
           search: str = "after_think", fallback: bool = True) -> float:
    """1.0 if the completion's final answer is equivalent to `reference`, else 0.0."""
    formats = check_options(answer_formats=answer_formats, search=search, fallback=fallback)
    if isinstance(reference, (int, float, Fraction)) and not isinstance(reference, bool):
        reference = str(reference)
    if not isinstance(reference, str) or not reference.strip():
        raise RewardInputError(f"math reference must be a non-empty str, got {reference!r}")
    answer = extract.extract(completion, formats, search)
    if answer is None:
        return 0.0
    decision = judge(answer, reference)
    if decision is None:
        if not fallback:
            return 0.0
        if not common.IN_WORKER:
            raise common.Escalate((answer, reference))
        decision = library_equal(answer, reference)
    return 1.0 if decision else 0.0
