"""Hand-labelled (gold, completion, label) pairs for judging a math-answer verifier.

What this is
------------
A fixed, deterministic test set for comparing answer verifiers (ours against the
``math-verify`` library) on MATH / GSM8K / AIME style answers.  Each ``Pair`` holds the
reference answer exactly as a dataset stores it (MATH's ``answer`` field: LaTeX without
``\\boxed`` or ``$``; GSM8K: a plain number), a realistic model completion that ends with
a final answer, and a label set by hand: is the completion's final answer equivalent to
the reference?

Every label was decided by a person reading the answer, as a careful human grader of
these datasets would, before any verifier was run on the set.  No verifier was used to
choose or change a label.

Labelling conventions
---------------------
1. The final answer is the last ``\\boxed{}`` / ``\\fbox{}`` answer or, where there is no
   box, the explicitly stated final answer ("The answer is ...", "Final Answer: ...",
   "#### ...", "<answer>...</answer>", "Answer: ...", a closing display or a concluding
   sentence such as "so she has 72 dollars in total").  Earlier boxes or numbers in the
   reasoning do not count; a self-correction ("wait, ... the answer is 24") is not a hedge.
2. Correct iff that answer is mathematically equivalent to the reference as the problem
   intends.  Notation does not matter: ``\\dfrac``/``\\tfrac``/``a/b``, spacing,
   ``\\left( \\right)``, a leading ``x =``, units words (``\\text{ cm}``, "apples"),
   ``^\\circ``, ``\\$``, thousands separators (``1,234``, ``1{,}234``, ``1\\,000``), a
   trailing period, Unicode symbols (``π``, ``√``, ``½``, U+2212 minus, ``×``, ``²``).
3. Unsimplified but equal values count (``\\frac{6}{8}`` for ``\\frac34``, ``\\sqrt{12}`` for
   ``2\\sqrt3``, ``10!`` for ``3628800``, ``\\binom{10}{3}`` for ``120``).  Algebraically
   equivalent expressions count (``(x+1)^2`` for ``x^2+2x+1``); interval and inequality
   notation for the same set count (``-3 < x < 3`` for ``(-3, 3)``).
4. Lists of solutions of an equation are unordered: the same set is correct ("2, -3",
   "-3, 2", "x = 2 or x = -3", ``\\pm``); a missing or extra root is wrong.  Ordered pairs,
   points and vectors are ordered: ``(2,-3)`` vs ``(-3,2)`` is wrong.  Sets ``\\{..\\}`` are
   unordered; a union of intervals in another order is the same set; intervals with
   different open/closed ends are wrong.
5. Equations: only sides swapped or terms reordered (``y = 3 - 2x`` vs ``y = -2x + 3``),
   or an equal right-hand side (``y = (x-1)(x-3)``) count as the same equation.  Scaled
   equations are left out as ambiguous.
6. Mixed numbers: ``2\\frac{1}{2}`` means 5/2 (correct against ``\\frac52``, wrong against
   ``1``; a naive reader multiplies 2 * 1/2 = 1).  ``6 2/3`` in plain text is 20/3.
7. Percent: gold ``50`` and answer ``50\\%`` are equal (the percent sign is a unit).  Pairs
   such as ``0.5`` vs ``50\\%`` are ambiguous and left out.
8. Decimals: an exact decimal equal to the fraction is correct (``0.25`` for ``\\frac14``,
   ``0.\\overline{3}`` for ``\\frac13``).  A rounded decimal for an exact value is wrong when
   clearly too coarse (``0.33`` for ``\\frac13``); borderline roundings are left out.
9. Truncated completions (generation cut off: ``\\boxed{12`` without its closing brace, an
   answer sentence or ``<answer>`` tag cut off, ``<think>`` never closed and no answer) are
   WRONG even when the visible prefix matches the reference.  The truncated category also
   holds complete controls (e.g. no trailing period) labelled by their answer.
10. Hedged answers (two different final answers: ``\\boxed{3}`` or ``\\boxed{5}``; "3 or 5"
    when the reference is the single value 3; ``\\pm 5`` for a single 5) are WRONG.  The
    same value stated twice, or "3 or 5" when the reference is the solution list "3, 5",
    is not a hedge.
11. No final answer at all (only reasoning, empty box, empty ``<answer>``) is WRONG.
12. Adversarial cases (``adversarial=True``) are always labelled False: their answers
    either differ from the short reference (exponent towers, near-misses such as
    ``10^{20000}+1``, long finite decimals against ``\\frac13``), are not mathematical
    answers at all (code payloads like ``__import__('os').system('ls')`` or
    ``eval('2+3')``, ``\\input{/etc/passwd}``, ``\\write18``, self-recursive ``\\def``), or
    redefine notation so that the box renders to something else.  They check that a
    verifier is safe and bounded as well as correct.

How it is built
---------------
Hand-written base cases ``(gold, answer_as_written, label)``, kept in ``math_cases.py``,
are grouped by category and rendered into completion templates (``\\boxed`` with
``$..$``, ``\\(..\\)`` and ``\\[..\\]``,
Minerva's "Final Answer: The final answer is $ANS$. I hope it is correct.", "The answer
is $ANS$." and plain "The answer is ANS.", "Answer: ANS", GSM8K "#### ANS", R1-style
``<think>..</think><answer>..</answer>`` and ``<think>..</think>`` then a box, and an
occasional ``\\fbox``).  Templates are taken from a fixed rotation, skipping those that do
not fit the answer (plain text only for plain-text answers, ``####`` only for plain
numbers), so each base case appears in 1-3 templates; a rotating list of generic
reasoning sentences precedes the answer.  The template never decides the label.  The
delimiter category uses its own ``\\(..\\)`` / ``\\[..\\]`` / ``$$..$$`` templates.
Extraction, truncation, hedging, no-answer and adversarial cases are written out (or, for
the very long adversarial strings, built by string multiplication: math_adversarial.py).
Nothing is random.

Left out as ambiguous: ``0.5`` vs ``50\\%``; ``0.333``/``1.38``/``3.14``/``1.57`` style
roundings of exact values; radians vs degrees (``\\frac{\\pi}{6}`` vs ``30^\\circ``); a
vector ``\\begin{pmatrix}1\\\\2\\end{pmatrix}`` written as ``(1, 2)`` and row vs column
vectors; a solution list written as a parenthesised pair; ``[1, 2]`` for a point;
European separators (``1.500``); ``3!!`` (double factorial or (3!)!); unit conversions
(``50\\text{ mm}`` for 5 cm, ``75`` cents for 0.75 dollars, "3 hours 30 minutes"); polar
points with negative radius; scaled equations; a double root listed twice; ``2I`` for a
scalar matrix; answers whose visible text equals the gold but contain NUL bytes,
zero-width spaces or ``\\newcommand`` aliases that render to the gold.
"""

from __future__ import annotations

import collections
import dataclasses
import re

from tests.rl.rewards.math_adversarial import adversarial
from tests.rl.rewards.math_cases import (
    CURRENCY_UNITS_PERCENT,
    DECIMAL_FRACTION,
    DELIMITERS,
    EQUATION,
    EXPRESSION,
    EXTRACTION_BASE,
    EXTRACTION_WRITTEN,
    FACTORIAL_BINOM,
    HEDGED,
    INTEGER,
    MATRIX_VECTOR,
    MIXED_NUMBER,
    NO_ANSWER,
    RADICAL_PI,
    SCIENTIFIC,
    SET_INTERVAL,
    SOLUTION_LIST,
    TEXT_CHOICE,
    TRUNCATED,
    TUPLE_POINT,
    UNICODE,
)


@dataclasses.dataclass(frozen=True)
class Pair:
    category: str  # see CATEGORIES
    gold: str  # the reference exactly as a dataset stores it
    completion: str  # a realistic model completion ending with its final answer
    label: bool  # hand-set: is the completion's final answer equivalent to gold?
    adversarial: bool = False


# --------------------------------------------------------------------------------------
# Templates
# --------------------------------------------------------------------------------------

REASONS = (
    "We start from the conditions in the problem and simplify step by step.",
    "Let me set up the equation carefully.\nCollecting like terms and solving gives the value.",
    "Plugging the given values into the formula and simplifying gives the result.",
    "First, compute each part separately. Then combine them and reduce.",
    "Using the identity derived above, the expression collapses nicely.",
    "Checking the boundary cases confirms the result holds in general.",
    "Counting the cases one at a time and adding them up gives the total.",
    "Multiplying out and cancelling the common factor leaves a simple expression.",
    "I double-check the arithmetic: each step is consistent with the original conditions.",
    "Step 1: Translate the word problem into an equation.\nStep 2: Solve it.",
    "From the second equation we isolate one variable and substitute into the first.",
    "The discriminant is positive, so we compute the roots with the quadratic formula.",
    "Rationalizing the denominator simplifies the radical expression.",
    "By the symmetry of the figure, it suffices to compute one part and scale it.",
    "Applying the Pythagorean theorem to the right triangle gives the missing length.",
    "We convert everything to the same units before combining.",
    "Let's think step by step.\nAfter combining the pieces, everything simplifies.",
    "Working modulo 1000 keeps the numbers small.",
    "Since the order of selection does not matter, we count combinations.",
    "Testing the candidate in the original equation confirms it works.",
    "The total cost is the sum of the individual costs.",
    "We need the number of items remaining after the purchases.",
    "Completing the square puts the expression into a standard form.",
    "Expanding both sides and comparing coefficients determines the unknowns.",
    "Using the given ratio, we scale the known quantity accordingly.",
    "Each of the three cases contributes independently, so we add them.",
    "Okay, so the problem asks for a single value.\nLet me recompute to be safe: it agrees.",
    "Computing the product entry by entry gives the components.",
    "Dividing by a negative number flips the inequality, so we check the signs.",
    "Hmm, wait. Let me re-read the question.\nYes, it asks exactly for this quantity.",
    "Let $s$ be the unknown. Translating the sentences into algebra, we solve for $s$.",
)

# name -> (kind, forms); kind: "any", "plain" (plain-text answers), "numeric" (plain numbers)
TEMPLATES = {
    "boxed": ("any", (
        "<<R>> Therefore, the final answer is $\\boxed{<<A>>}$.",
        "<<R>>\n\nTherefore, the final answer is $\\boxed{<<A>>}$.",
    )),
    "paren_boxed": ("any", (
        "<<R>> Everything checks out, so the answer is \\(\\boxed{<<A>>}\\).",
        "<<R>>\nThis matches the check above, so the answer is \\(\\boxed{<<A>>}\\).",
    )),
    "display_boxed": ("any", (
        "<<R>>\n\nThe final answer is\n\\[\\boxed{<<A>>}\\]",
        "<<R>> Hence\n\\[\n\\boxed{<<A>>}\n\\]",
    )),
    "minerva": ("any", (
        "<<R>>\nFinal Answer: The final answer is $<<A>>$. I hope it is correct.",
    )),
    "dollar": ("any", (
        "<<R>> The answer is $<<A>>$.",
        "<<R>>\nThe answer is $<<A>>$.",
    )),
    "plain": ("plain", (
        "<<R>> The answer is <<A>>.",
        "<<R>>\nSo the answer is <<A>>.",
    )),
    "answer_line": ("any", (
        "<<R>>\nAnswer: <<A>>",
    )),
    "gsm8k": ("numeric", (
        "<<R>>\n#### <<A>>",
    )),
    "r1": ("any", (
        "<think>\n<<R>>\n</think>\n<answer><<A>></answer>",
        "<think>\n<<R>>\n</think>\n\n<answer>\n<<A>>\n</answer>",
    )),
    "think_boxed": ("any", (
        "<think>\n<<R>>\n</think>\nSo the answer is $\\boxed{<<A>>}$.",
    )),
    "fbox": ("any", (
        "<<R>> Thus the answer is \\fbox{<<A>>}.",
    )),
}

# The order templates are taken in; fbox is deliberately rare.
ROTATION = (
    "boxed", "minerva", "plain", "r1", "paren_boxed", "gsm8k", "answer_line", "display_boxed",
    "think_boxed", "dollar", "boxed", "plain", "minerva", "gsm8k", "r1", "fbox",
    "answer_line", "paren_boxed", "boxed", "dollar", "think_boxed", "display_boxed",
)

DELIMITER_TEMPLATES = (
    "<<R>> The answer is \\(<<A>>\\).",
    "<<R>> Thus the answer is\n\\[\n<<A>>\n\\]",
    "<<R>> Hence the final answer is $$<<A>>$$",
    "<<R>> So we get $$\\boxed{<<A>>}$$",
    "<<R>>\n\\[ \\boxed{ <<A>> } \\]",
    "<<R>> The final answer is \\(\\displaystyle <<A>>\\).",
    "<<R>>\nFinal answer: \\( \\boxed{<<A>>} \\)",
)

_NUMERIC = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")


def _is_numeric(ans: str) -> bool:
    return _NUMERIC.fullmatch(ans) is not None


def _is_plain(ans: str) -> bool:
    return bool(ans) and not any(c in ans for c in "\\{}^_$&") and not ans.endswith(".")


def _fits(name: str, ans: str) -> bool:
    kind = TEMPLATES[name][0]
    if kind == "plain":
        return _is_plain(ans)
    if kind == "numeric":
        return _is_numeric(ans)
    return True


def _fill(form: str, reason: str, ans: str) -> str:
    return form.replace("<<R>>", reason).replace("<<A>>", ans)


# --------------------------------------------------------------------------------------
# Builder
# --------------------------------------------------------------------------------------

TEMPLATED = (
    ("integer", INTEGER),
    ("decimal_fraction", DECIMAL_FRACTION),
    ("radical_pi", RADICAL_PI),
    ("expression", EXPRESSION),
    ("solution_list", SOLUTION_LIST),
    ("tuple_point", TUPLE_POINT),
    ("set_interval", SET_INTERVAL),
    ("equation", EQUATION),
    ("matrix_vector", MATRIX_VECTOR),
    ("factorial_binom", FACTORIAL_BINOM),
    ("unicode", UNICODE),
    ("mixed_number", MIXED_NUMBER),
    ("currency_units_percent", CURRENCY_UNITS_PERCENT),
    ("scientific", SCIENTIFIC),
    ("text_choice", TEXT_CHOICE),
)

WRITTEN = (
    ("extraction_formats", EXTRACTION_WRITTEN),
    ("truncated", TRUNCATED),
    ("hedged", HEDGED),
    ("no_answer", NO_ANSWER),
)

CATEGORIES = tuple(c for c, _ in TEMPLATED) + (
    "delimiters", "extraction_formats", "truncated", "hedged", "no_answer", "adversarial")


def _build() -> tuple[Pair, ...]:
    pairs: list[Pair] = []
    state = {"pos": 0, "reason": 0}

    def next_reason() -> str:
        r = REASONS[state["reason"] % len(REASONS)]
        state["reason"] += 1
        return r

    def render(cat: str, gold: str, ans: str, label: bool, n: int) -> None:
        chosen: list[str] = []
        for _ in range(len(ROTATION)):
            if len(chosen) == n:
                break
            name = ROTATION[state["pos"] % len(ROTATION)]
            state["pos"] += 1
            if name not in chosen and _fits(name, ans):
                chosen.append(name)
        for name in chosen:
            forms = TEMPLATES[name][1]
            form = forms[state["reason"] % len(forms)]
            shown = ans
            if name == "answer_line" and not _is_plain(ans):
                shown = "$" + ans + "$"
            pairs.append(Pair(cat, gold, _fill(form, next_reason(), shown), label))

    for cat, rows in TEMPLATED:
        for i, (gold, ans, label) in enumerate(rows):
            render(cat, gold, ans, label, 1 + (i * 5 + len(gold) + len(ans)) % 3)

    dpos = 0
    for i, (gold, ans, label) in enumerate(DELIMITERS):
        for _ in range(2 + i % 2):
            form = DELIMITER_TEMPLATES[dpos % len(DELIMITER_TEMPLATES)]
            dpos += 1
            pairs.append(Pair("delimiters", gold, _fill(form, next_reason(), ans), label))

    for gold, ans, label in EXTRACTION_BASE:
        render("extraction_formats", gold, ans, label, 3)

    for cat, rows in WRITTEN:
        for gold, completion, label in rows:
            pairs.append(Pair(cat, gold, completion, label))

    for gold, completion in adversarial():
        pairs.append(Pair("adversarial", gold, completion, False, adversarial=True))
    return tuple(pairs)


PAIRS: tuple[Pair, ...] = _build()


def _check(pairs: tuple[Pair, ...]) -> None:
    keys = [(p.gold, p.completion) for p in pairs]
    dupes = [k for k, c in collections.Counter(keys).items() if c > 1]
    assert not dupes, f"duplicate (gold, completion) pairs: {dupes[:3]}"
    assert all(not p.label for p in pairs if p.adversarial), "adversarial pairs must be False"
    assert all(p.adversarial == (p.category == "adversarial") for p in pairs)
    assert all(p.category in CATEGORIES for p in pairs)
    assert len(pairs) >= 480, len(pairs)
    assert sum(p.adversarial for p in pairs) >= 30
    assert sum(p.category == "integer" for p in pairs) >= 60
    for cat in CATEGORIES:
        labels = {p.label for p in pairs if p.category == cat}
        want = {False} if cat == "adversarial" else {True, False}
        assert labels == want, (cat, labels)


if __name__ == "__main__":
    _check(PAIRS)
    by_cat: dict[str, list[int]] = {c: [0, 0] for c in CATEGORIES}
    for p in PAIRS:
        by_cat[p.category][0 if p.label else 1] += 1
    print(f"{'category':<24} {'total':>6} {'correct':>8} {'wrong':>6}")
    for cat, (yes, no) in by_cat.items():
        print(f"{cat:<24} {yes + no:>6} {yes:>8} {no:>6}")
    n_true = sum(p.label for p in PAIRS)
    n_adv = sum(p.adversarial for p in PAIRS)
    plain = [p for p in PAIRS if not p.adversarial]
    print(f"{'TOTAL':<24} {len(PAIRS):>6} {n_true:>8} {len(PAIRS) - n_true:>6}")
    print(f"correct overall: {n_true / len(PAIRS):.1%}; "
          f"non-adversarial: {sum(p.label for p in plain) / len(plain):.1%}; "
          f"adversarial: {n_adv}")
