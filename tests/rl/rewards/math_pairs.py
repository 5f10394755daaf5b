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
Hand-written base cases ``(gold, answer_as_written, label)`` are grouped by category and
rendered into completion templates (``\\boxed`` with ``$..$``, ``\\(..\\)`` and ``\\[..\\]``,
Minerva's "Final Answer: The final answer is $ANS$. I hope it is correct.", "The answer
is $ANS$." and plain "The answer is ANS.", "Answer: ANS", GSM8K "#### ANS", R1-style
``<think>..</think><answer>..</answer>`` and ``<think>..</think>`` then a box, and an
occasional ``\\fbox``).  Templates are taken from a fixed rotation, skipping those that do
not fit the answer (plain text only for plain-text answers, ``####`` only for plain
numbers), so each base case appears in 1-3 templates; a rotating list of generic
reasoning sentences precedes the answer.  The template never decides the label.  The
delimiter category uses its own ``\\(..\\)`` / ``\\[..\\]`` / ``$$..$$`` templates.
Extraction, truncation, hedging, no-answer and adversarial cases are written out (or, for
the very long adversarial strings, built by string multiplication).  Nothing is random.

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


@dataclasses.dataclass(frozen=True)
class Pair:
    category: str  # see CATEGORIES
    gold: str  # the reference exactly as a dataset stores it
    completion: str  # a realistic model completion ending with its final answer
    label: bool  # hand-set: is the completion's final answer equivalent to gold?
    adversarial: bool = False


# --------------------------------------------------------------------------------------
# Base cases: (gold, answer as the model writes it, label).  Rendered into templates.
# --------------------------------------------------------------------------------------

INTEGER = (
    ("72", "72", True),
    ("72", "72.00", True),
    ("72", r"\$72", True),
    ("72", "72 apples", True),
    ("72", r"72 \text{ apples}", True),
    ("72", "27", False),
    ("72", "-72", False),
    ("72", "72.5", False),
    ("72", "720", False),
    ("72", "7.2", False),
    ("72", "72,000", False),
    ("1234", "1,234", True),
    ("1234", "1{,}234", True),
    ("1234", "1243", False),
    ("1000000", r"1\,000\,000", True),
    ("1000000", "1 000 000", True),
    ("1000000", "1,000,000", True),
    ("1000000", "100000", False),
    ("1000000", r"10\,000\,000", False),
    ("18", "18.0", True),
    ("18", "18", True),
    ("18", "81", False),
    ("-5", "-5", True),
    ("-5", "5", False),
    ("0", "0", True),
    ("0", "0.0", True),
    ("0", "1", False),
    ("33", "033", True),
    ("33", "330", False),
    ("204", "204", True),
    ("204", "240", False),
    ("3", "x = 3", True),
    ("3", "n=3", True),
    ("3", "3.", True),
    ("3", "x = 13", False),
    ("12", r"12\text{ dollars}", True),
    ("12", r"\$12.00", True),
    ("12", r"\$12.50", False),
    ("1500", "1,500", True),
    ("1500", r"\$1,500", True),
    ("1500", "150", False),
    ("45", "45 minutes", True),
    ("45", r"45\text{ minutes}", True),
    ("45", "4.5", False),
    ("45", "54", False),
    ("100", "10^2", True),
    ("64", "2^6", True),
    ("64", "2^8", False),
    ("64", "6^2", False),
    ("999", "999", True),
    ("999", "1000", False),
    ("1000", "1,000", True),
    ("1000", "10000", False),
    ("25", "twenty-five", True),
    ("25", "twenty", False),
    ("8", r"8 \text{ hours}", True),
    ("8", "80", False),
    ("16", r"\sqrt{256}", True),
    ("16", "4^2", True),
    ("16", r"\sqrt{16}", False),
    ("42", "42", True),
    ("42", "41.99", False),
    ("120", "120.0", True),
    ("2023", "2,023", True),
    ("2023", "2032", False),
    ("-12", "-12", True),
    ("-12", "12", False),
    ("50", "50.", True),
    ("7", r"\mathbf{7}", True),
    ("113", "113", True),
    ("113", "131", False),
    ("385", "385", True),
    ("385", "358", False),
    ("156", "156", True),
    ("156", r"\$156", True),
    ("9", "9", True),
    ("9", "9 cups", True),
    ("240", "240", True),
    ("240", r"240\text{ miles}", True),
    ("5", "5", True),
    ("5", "x=5", True),
    ("36", "36", True),
    ("36", "36.0", True),
    ("2500", "2,500", True),
    ("2500", r"\$2{,}500", True),
    ("14", r"14 \text{ students}", True),
    ("-7", "-7", True),
    ("601", "601", True),
)

DECIMAL_FRACTION = (
    (r"\frac{3}{4}", "0.75", True),
    (r"\frac{3}{4}", "3/4", True),
    (r"\frac{3}{4}", r"\tfrac34", True),
    (r"\frac{3}{4}", r"\dfrac{3}{4}", True),
    (r"\frac{3}{4}", r"\frac{6}{8}", True),
    (r"\frac{3}{4}", r"\frac{4}{3}", False),
    (r"\frac{3}{4}", "0.7", False),
    (r"\frac{3}{4}", "0.075", False),
    (r"-\frac{1}{2}", r"\frac{-1}{2}", True),
    (r"-\frac{1}{2}", "-0.5", True),
    (r"-\frac{1}{2}", r"\frac{1}{2}", False),
    (r"-\frac{1}{2}", r"-\frac{1}{-2}", False),
    (r"\frac14", "0.25", True),
    (r"\frac14", "0.4", False),
    (r"\frac{1}{3}", r"0.\overline{3}", True),
    (r"\frac{1}{3}", "0.33", False),
    (r"\frac{2}{3}", r"\frac{4}{6}", True),
    (r"\frac{2}{3}", "2/3", True),
    (r"\frac{2}{3}", "3/2", False),
    (r"\frac{2}{3}", "0.67", False),
    ("0.5", r"\frac{1}{2}", True),
    ("0.5", r"\frac12", True),
    ("0.5", "1/2", True),
    ("0.5", ".5", True),
    ("0.5", "0.05", False),
    ("0.5", "5", False),
    (r"\frac{7}{2}", "3.5", True),
    (r"\frac{7}{2}", "7/2", True),
    (r"\frac{7}{2}", r"\frac{2}{7}", False),
    ("2.5", r"\frac{5}{2}", True),
    ("2.5", "2.50", True),
    ("2.5", "25", False),
    ("0.125", r"\frac{1}{8}", True),
    ("0.125", "0.12", False),
    (r"\frac{9}{10}", "0.9", True),
    (r"\frac{9}{10}", "0.09", False),
    (r"\frac{11}{8}", "1.375", True),
    (r"\frac{11}{8}", "1.4", False),
    (r"\frac{5}{3}", r"1.\overline{6}", True),
    (r"\frac{5}{3}", "1.6", False),
    (r"\frac{1}{6}", r"0.1\overline{6}", True),
    (r"\frac{1}{6}", r"0.\overline{16}", False),
    ("-0.2", r"-\frac{1}{5}", True),
    ("-0.2", r"\frac{1}{5}", False),
    (r"\frac{3}{8}", r"\frac38", True),
    (r"\frac{3}{8}", r"\frac{8}{3}", False),
    (r"\frac{13}{20}", "0.65", True),
    (r"\frac{13}{20}", "0.56", False),
    (r"\frac{1}{100}", "0.01", True),
    (r"\frac{1}{100}", "0.1", False),
    (r"\frac{5}{8}", "0.625", True),
    (r"\frac{5}{8}", "5/8", True),
    ("0.2", r"\frac{1}{5}", True),
    ("0.2", r"\frac{2}{10}", True),
    (r"\frac{7}{12}", r"\dfrac{7}{12}", True),
    (r"-\frac{3}{2}", "-1.5", True),
    (r"-\frac{3}{2}", r"\frac{-3}{2}", True),
    ("1.25", r"\frac54", True),
)

RADICAL_PI = (
    (r"2\sqrt{3}", r"\sqrt{12}", True),
    (r"2\sqrt{3}", r"2 \sqrt 3", True),
    (r"2\sqrt{3}", r"2\sqrt3", True),
    (r"2\sqrt{3}", r"3\sqrt{2}", False),
    (r"2\sqrt{3}", r"\sqrt{6}", False),
    (r"2\sqrt{3}", r"\sqrt{3}", False),
    (r"\frac{\pi}{2}", r"\pi/2", True),
    (r"\frac{\pi}{2}", r"\frac{1}{2}\pi", True),
    (r"\frac{\pi}{2}", r"\frac12 \pi", True),
    (r"\frac{\pi}{2}", r"0.5\pi", True),
    (r"\frac{\pi}{2}", r"\frac{\pi}{4}", False),
    (r"\frac{\pi}{2}", r"2\pi", False),
    (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}", True),
    (r"\frac{\sqrt{2}}{2}", r"\frac{\sqrt2}{2}", True),
    (r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2", True),
    (r"\frac{\sqrt{2}}{2}", r"\sqrt{\frac{1}{2}}", True),
    (r"\frac{\sqrt{2}}{2}", r"\frac{2}{\sqrt{2}}", False),
    (r"\frac{\sqrt{2}}{2}", r"\sqrt{2}", False),
    (r"\frac{\sqrt{2}}{2}", r"\frac{\sqrt{3}}{2}", False),
    (r"4\pi", r"4 \pi", True),
    (r"4\pi", r"\pi \cdot 4", True),
    (r"4\pi", "4", False),
    (r"4\pi", r"\pi^4", False),
    (r"4\pi", r"16\pi", False),
    (r"5\sqrt{2}", r"\sqrt{50}", True),
    (r"5\sqrt{2}", r"\sqrt{52}", False),
    (r"5\sqrt{2}", r"2\sqrt{5}", False),
    (r"\sqrt{5}", "5^{1/2}", True),
    (r"\sqrt{5}", r"\sqrt5", True),
    (r"\sqrt{5}", "5", False),
    (r"3+\sqrt{2}", r"\sqrt{2}+3", True),
    (r"3+\sqrt{2}", r"3-\sqrt{2}", False),
    (r"\frac{3\sqrt{3}}{2}", r"\frac{3}{2}\sqrt{3}", True),
    (r"\frac{3\sqrt{3}}{2}", r"\frac{9}{2\sqrt{3}}", True),
    (r"\frac{3\sqrt{3}}{2}", r"\frac{3\sqrt{2}}{2}", False),
    (r"\frac{3\sqrt{3}}{2}", r"\frac{\sqrt{3}}{2}", False),
    (r"2\sqrt[3]{2}", r"\sqrt[3]{16}", True),
    (r"2\sqrt[3]{2}", r"\sqrt[3]{8}", False),
    (r"2\sqrt[3]{2}", r"2\sqrt{2}", False),
    (r"8-4\sqrt{3}", r"4(2-\sqrt{3})", True),
    (r"8-4\sqrt{3}", r"-4\sqrt{3}+8", True),
    (r"8-4\sqrt{3}", r"4\sqrt{3}-8", False),
    (r"\frac{1+\sqrt{5}}{2}", r"\frac{\sqrt{5}+1}{2}", True),
    (r"\frac{1+\sqrt{5}}{2}", r"\frac{1}{2}+\frac{\sqrt{5}}{2}", True),
    (r"\frac{1+\sqrt{5}}{2}", r"\frac{1-\sqrt{5}}{2}", False),
    (r"\frac{1+\sqrt{5}}{2}", r"1+\frac{\sqrt5}{2}", False),
    (r"3\sqrt{2}", r"\sqrt{18}", True),
    (r"\frac{\sqrt{3}}{3}", r"\frac{1}{\sqrt{3}}", True),
    (r"\frac{\sqrt{3}}{3}", r"\frac{\sqrt3}{3}", True),
    (r"6\pi", r"6 \pi", True),
    (r"\frac{2\pi}{3}", r"\frac{2}{3}\pi", True),
    (r"\sqrt{7}", r"\sqrt 7", True),
)

EXPRESSION = (
    ("x^2+2x+1", "(x+1)^2", True),
    ("x^2+2x+1", "1+2x+x^2", True),
    ("x^2+2x+1", "x^2+2x-1", False),
    ("x^2+2x+1", "(x-1)^2", False),
    ("3x^2-5x+2", "-5x+3x^2+2", True),
    ("3x^2-5x+2", "(3x-2)(x-1)", True),
    ("3x^2-5x+2", "(3x+2)(x-1)", False),
    ("3x^2-5x+2", "3x^2+5x+2", False),
    (r"\frac{x+1}{2}", r"\frac{1}{2}(x+1)", True),
    (r"\frac{x+1}{2}", r"\frac{x}{2}+\frac{1}{2}", True),
    (r"\frac{x+1}{2}", "(x+1)/2", True),
    (r"\frac{x+1}{2}", r"x+\frac{1}{2}", False),
    (r"\frac{x+1}{2}", "x+1/2", False),
    (r"\frac{x+1}{2}", r"\frac{2}{x+1}", False),
    ("(x-2)(x+3)", "(x+3)(x-2)", True),
    ("(x-2)(x+3)", "(x-3)(x+2)", False),
    ("(x-2)(x+3)", "(x+2)(x-3)", False),
    ("2x+2", "2(x+1)", True),
    ("6x^2+4x", "2x(3x+2)", True),
    ("6x^2+4x", "2x(3x+4)", False),
    (r"\frac{1}{x-1}", r"\frac{1}{-1+x}", True),
    (r"\frac{1}{x-1}", r"\frac{-1}{1-x}", True),
    (r"\frac{1}{x-1}", r"\frac{1}{1-x}", False),
    ("a^2-b^2", "(a-b)(a+b)", True),
    ("a^2-b^2", "-b^2+a^2", True),
    ("a^2-b^2", "(a-b)^2", False),
    ("x^3", r"x\cdot x\cdot x", True),
    ("x^{3}", "x^3", True),
    ("x^3", "3x", False),
    ("2^{x+1}", r"2\cdot 2^x", True),
    ("2^{x+1}", "2^x+1", False),
    (r"\frac{x^2}{4}", r"\frac{1}{4}x^2", True),
    (r"\frac{x^2}{4}", "0.25x^2", True),
    (r"\frac{x^2}{4}", r"\frac{x^2}{2}", False),
    ("4x-7", "-7+4x", True),
    ("4x-7", "7-4x", False),
    ("4x-7", "4(x-7)", False),
    (r"\sqrt{x^2+1}", "(x^2+1)^{1/2}", True),
    (r"\sqrt{x^2+1}", "x+1", False),
    ("ab", "ba", True),
    (r"\frac{a+b}{ab}", r"\frac{1}{a}+\frac{1}{b}", True),
    (r"\frac{a+b}{ab}", r"\frac{1}{a+b}", False),
    (r"\frac{n(n+1)}{2}", r"\frac{n^2+n}{2}", True),
    (r"\frac{n(n+1)}{2}", r"\frac{n(n-1)}{2}", False),
    ("2x^2-8", "2(x^2-4)", True),
    ("x+y", "y+x", True),
    (r"\frac{3}{x}", "3/x", True),
    ("x^2-1", "(x+1)(x-1)", True),
)

SOLUTION_LIST = (
    ("2, -3", "-3, 2", True),
    ("2, -3", r"x = 2 \text{ or } x = -3", True),
    ("2, -3", "x = 2 or x = -3", True),
    ("2, -3", "x=-3, x=2", True),
    ("2, -3", "2, 3", False),
    ("2, -3", "-2, 3", False),
    ("2, -3", "2", False),
    ("2, -3", "2, -3, 0", False),
    (r"\pm 2", "2, -2", True),
    (r"\pm 2", "2", False),
    (r"\pm2", r"\pm 4", False),
    ("-2,2", r"\pm 2", True),
    (r"1+\sqrt{3}, 1-\sqrt{3}", r"1\pm\sqrt{3}", True),
    (r"1+\sqrt{3}, 1-\sqrt{3}", r"1 \pm \sqrt{2}", False),
    (r"1+\sqrt{3}, 1-\sqrt{3}", r"-1\pm\sqrt{3}", False),
    ("1, 2, 3", "3, 2, 1", True),
    ("1,2,3", "1, 2, 3", True),
    ("1, 2, 3", "1, 2", False),
    (r"0, \frac{1}{2}", r"\frac12, 0", True),
    (r"0, \frac{1}{2}", "0, 2", False),
    ("-1, 5", "5, -1", True),
    ("-1, 5", "x = -1, 5", True),
    ("-1, 5", "1, -5", False),
    ("4, -4", r"x=\pm4", True),
    (r"-\frac{1}{3}, 2", r"2, -\frac13", True),
    (r"-\frac{1}{3}, 2", "2, -3", False),
    (r"\frac{-1 + i\sqrt{3}}{2}, \frac{-1 - i\sqrt{3}}{2}", r"\frac{-1 \pm i\sqrt{3}}{2}", True),
    (r"\frac{-1 + i\sqrt{3}}{2}, \frac{-1 - i\sqrt{3}}{2}", r"\frac{1 \pm i\sqrt{3}}{2}", False),
    ("0, 1", r"x=0 \text{ and } x=1", True),
    ("5, -5", r"-5 \text{ and } 5", True),
    ("1, -1, 2, -2", r"\pm 1, \pm 2", True),
    ("1, -1, 2, -2", "1, 2", False),
)

TUPLE_POINT = (
    ("(1, -2)", "(1,-2)", True),
    ("(1, -2)", r"\left(1, -2\right)", True),
    ("(1, -2)", "x=1, y=-2", True),
    ("(1, -2)", "(-2, 1)", False),
    ("(1, -2)", "(1, 2)", False),
    ("(1, -2)", "(-1, 2)", False),
    (r"(\frac{1}{2}, 3)", "(0.5, 3)", True),
    (r"(\frac{1}{2}, 3)", r"\left(\tfrac12, 3\right)", True),
    (r"(\frac{1}{2}, 3)", r"(3, \frac{1}{2})", False),
    ("(2, 3, 4)", "(2,3,4)", True),
    ("(2, 3, 4)", "(2, 4, 3)", False),
    ("(2, 3, 4)", "(2, 3)", False),
    ("(0, 0)", "(0,0)", True),
    ("(0, 0)", "(0, 1)", False),
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{\pi}{2})", True),
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{3\pi}{2})", False),
    ("(-1, 4)", "(-1,4)", True),
    ("(-1, 4)", "(4, -1)", False),
    (r"(2\sqrt{2}, \frac{\pi}{4})", r"(\sqrt{8}, \frac{\pi}{4})", True),
    (r"(2\sqrt{2}, \frac{\pi}{4})", r"(2\sqrt{2}, \frac{\pi}{2})", False),
    ("(3,5)", "(3, 5)", True),
    ("(3,5)", "(5, 3)", False),
    ("(4, 7)", r"\left( 4, 7 \right)", True),
    ("(-3, 0)", "(-3,0)", True),
    (r"(\frac{3}{2}, -1)", "(1.5, -1)", True),
)

SET_INTERVAL = (
    (r"\{1, 2\}", r"\{2, 1\}", True),
    (r"\{1, 2\}", r"\{1, 2, 3\}", False),
    (r"\{1,2,3\}", r"\{3,1,2\}", True),
    (r"(-\infty, 2) \cup (3, \infty)", r"(3, \infty) \cup (-\infty, 2)", True),
    (r"(-\infty, 2) \cup (3, \infty)", r"(-\infty,2)\cup(3,\infty)", True),
    (r"(-\infty, 2) \cup (3, \infty)", r"(-\infty, 2] \cup [3, \infty)", False),
    (r"(-\infty, 2) \cup (3, \infty)", "(2, 3)", False),
    ("[1, 5)", "[1,5)", True),
    ("[1, 5)", r"\left[1, 5\right)", True),
    ("[1, 5)", "(1, 5)", False),
    ("[1, 5)", "[1, 5]", False),
    (r"(-\infty, \infty)", r"\mathbb{R}", True),
    (r"(-\infty, \infty)", r"(-\infty, 0)", False),
    (r"(0, \infty)", r"(0,\infty)", True),
    (r"(0, \infty)", r"[0, \infty)", False),
    ("(-3, 3)", "-3 < x < 3", True),
    ("(-3, 3)", r"-3 \le x \le 3", False),
    ("[-2, 7]", "[-2,7]", True),
    ("[-2, 7]", "[-7, 2]", False),
    (r"\{-1, 0, 1\}", r"\{0, 1, -1\}", True),
    (r"\{-1, 0, 1\}", r"\{-1, 1\}", False),
    (r"(-\infty, -1] \cup [4, \infty)", r"[4, \infty) \cup (-\infty, -1]", True),
    (r"(-\infty, -1] \cup [4, \infty)", r"(-\infty,-1]\cup[4,\infty)", True),
    (r"(-\infty, -1] \cup [4, \infty)", r"(-\infty, -1) \cup (4, \infty)", False),
    (r"\emptyset", r"\varnothing", True),
    (r"\emptyset", r"\{0\}", False),
    ("(1, 4]", "(1,4]", True),
    (r"[2, \infty)", r"x \ge 2", True),
    (r"[2, \infty)", "x > 2", False),
    (r"\{2, 4, 6\}", r"\{6, 4, 2\}", True),
    ("(-5, 5]", "(-5,5]", True),
    (r"[0, \infty)", r"[0,\infty)", True),
)

EQUATION = (
    ("y = -2x + 3", "y=-2x+3", True),
    ("y = -2x + 3", "y = 3 - 2x", True),
    ("y = -2x + 3", "-2x + 3 = y", True),
    ("y = -2x + 3", "y = 2x + 3", False),
    ("y = -2x + 3", "y = -2x - 3", False),
    ("y = -2x + 3", "y = 3x - 2", False),
    ("x^2 + y^2 = 25", "y^2 + x^2 = 25", True),
    ("x^2 + y^2 = 25", "25 = x^2 + y^2", True),
    ("x^2 + y^2 = 25", "x^2 + y^2 = 5", False),
    (r"y = \frac{1}{2}x - 4", r"y = \frac{x}{2} - 4", True),
    (r"y = \frac{1}{2}x - 4", "y = 0.5x - 4", True),
    (r"y = \frac{1}{2}x - 4", "y = 2x - 4", False),
    ("2x + 3y = 6", "3y + 2x = 6", True),
    ("2x + 3y = 6", "6 = 2x+3y", True),
    ("2x + 3y = 6", "2x - 3y = 6", False),
    ("x = 4", "x=4", True),
    ("x = 4", "y = 4", False),
    ("y = x^2 - 4x + 3", "y = (x-1)(x-3)", True),
    ("y = x^2 - 4x + 3", "y = (x+1)(x+3)", False),
    (r"\frac{x^2}{9} + \frac{y^2}{4} = 1", r"\frac{y^2}{4} + \frac{x^2}{9} = 1", True),
    (r"\frac{x^2}{9} + \frac{y^2}{4} = 1", r"\frac{x^2}{4} + \frac{y^2}{9} = 1", False),
    ("y = 3x - 1", "y = -1 + 3x", True),
    ("y = 3x - 1", "3x - 1 = y", True),
)

_V12 = r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}"
_M1234 = r"\begin{pmatrix} 1 & 2 \\ 3 & 4 \end{pmatrix}"
_V3 = r"\begin{pmatrix} -1 \\ 3 \\ 0 \end{pmatrix}"
_VH = r"\begin{pmatrix} \frac{1}{2} \\ -\frac{3}{2} \end{pmatrix}"
_M35 = r"\begin{pmatrix} 3 & -1 \\ 2 & 5 \end{pmatrix}"
_V421 = r"\begin{pmatrix} 4 \\ -2 \\ 1 \end{pmatrix}"
MATRIX_VECTOR = (
    (_V12, r"\begin{bmatrix}1\\2\end{bmatrix}", True),
    (_V12, r"\begin{pmatrix}1\\2\end{pmatrix}", True),
    (_V12, r"\begin{pmatrix} 2 \\ 1 \end{pmatrix}", False),
    (_V12, r"\begin{pmatrix} 1 \\ -2 \end{pmatrix}", False),
    (_M1234, r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", True),
    (_M1234, r"\begin{bmatrix} 1 & 2 \\ 3 & 4 \end{bmatrix}", True),
    (_M1234, r"\begin{pmatrix} 1 & 3 \\ 2 & 4 \end{pmatrix}", False),
    (_M1234, r"\begin{pmatrix} 1 & 2 \\ 3 & 5 \end{pmatrix}", False),
    (_V3, r"\begin{pmatrix}-1\\3\\0\end{pmatrix}", True),
    (_V3, r"\begin{pmatrix} -1 \\ 0 \\ 3 \end{pmatrix}", False),
    (_VH, r"\begin{pmatrix} 1/2 \\ -3/2 \end{pmatrix}", True),
    (_VH, r"\begin{pmatrix} 0.5 \\ -1.5 \end{pmatrix}", True),
    (_VH, r"\begin{pmatrix} \frac{1}{2} \\ \frac{3}{2} \end{pmatrix}", False),
    (_M35, r"\left(\begin{array}{cc} 3 & -1 \\ 2 & 5 \end{array}\right)", True),
    (_M35, r"\begin{pmatrix} 3 & 1 \\ 2 & 5 \end{pmatrix}", False),
    (_V421, r"\begin{pmatrix}  4 \\  -2 \\  1 \end{pmatrix}", True),
    (_V421, r"\begin{pmatrix} 4 \\ -2 \end{pmatrix}", False),
    (r"\begin{pmatrix} \sqrt{2} \\ 2 \end{pmatrix}",
     r"\begin{pmatrix} \sqrt{2} \\ \sqrt{4} \end{pmatrix}", True),
    (r"\begin{pmatrix} 0 & 0 \\ 0 & 0 \end{pmatrix}",
     r"\begin{pmatrix}0&0\\0&0\end{pmatrix}", True),
    (r"\begin{pmatrix} 0 & 0 \\ 0 & 0 \end{pmatrix}",
     r"\begin{pmatrix} 1 & 0 \\ 0 & 1 \end{pmatrix}", False),
)

FACTORIAL_BINOM = (
    ("3628800", "10!", True),
    ("10!", "3628800", True),
    ("3628800", "3,628,800", True),
    ("3628800", "9!", False),
    ("3628800", "362880", False),
    ("120", r"\binom{10}{3}", True),
    (r"\binom{10}{3}", "120", True),
    ("120", r"\binom{10}{4}", False),
    ("120", "5!", True),
    ("120", "6!", False),
    ("210", r"\binom{10}{4}", True),
    ("210", r"\binom{10}{6}", True),
    ("210", r"\binom{10}{5}", False),
    ("252", r"\dbinom{10}{5}", True),
    ("252", r"{10 \choose 5}", True),
    ("720", "6!", True),
    ("5040", "7!", True),
    ("5040", r"\frac{8!}{8}", True),
    ("5040", r"\frac{8!}{2}", False),
    ("56", r"\binom{8}{3}", True),
    ("56", r"\binom{8}{2}", False),
    (r"\frac{1}{120}", r"\frac{1}{5!}", True),
    (r"\frac{1}{120}", r"\frac{1}{4!}", False),
    ("1", "0!", True),
    ("0", "0!", False),
    ("24", "4!", True),
    ("24", "4", False),
    ("45", "C(10,2)", True),
    ("45", "C(10,3)", False),
    ("40320", "8!", True),
    ("40320", "8!/2", False),
    ("6", r"\binom{4}{2}", True),
    ("10", r"\binom{5}{2}", True),
    ("362880", "9!", True),
)

UNICODE = (
    (r"\pi", "π", True),
    (r"\frac{\pi}{2}", "π/2", True),
    (r"2\pi", "2π", True),
    (r"2\pi", "π", False),
    (r"\sqrt{2}", "√2", True),
    (r"\sqrt{2}", "√3", False),
    (r"3\sqrt{2}", "3√2", True),
    (r"3\sqrt{2}", "2√3", False),
    (r"\frac{1}{2}", "½", True),
    (r"\frac{1}{2}", "¼", False),
    (r"\frac{3}{4}", "¾", True),
    ("-3", "\u22123", True),  # U+2212 MINUS SIGN
    ("-3", "3", False),
    ("3", "\u22123", False),
    ("12", "3 × 4", True),
    ("12", "3 × 5", False),
    ("x^2", "x²", True),
    ("x^2", "x³", False),
    ("60", "60°", True),
    ("60", "6°", False),
    (r"\infty", "∞", True),
    (r"(-\infty, 0)", "(\u2212∞, 0)", True),
    (r"(-\infty, 0)", "(\u2212∞, 0]", False),
    (r"\frac{5}{2}", "2½", True),
    (r"-\frac{1}{2}", "\u2212½", True),
    ("6", "\uff16", True),  # FULLWIDTH DIGIT SIX
    (r"\pi r^2", "πr²", True),
    (r"\pi r^2", "2πr", False),
    (r"\frac{\pi}{4}", "π/4", True),
    (r"\sqrt{3}", "√3", True),
    ("-1", "\u22121", True),
)

MIXED_NUMBER = (
    (r"\frac{5}{2}", r"2\frac{1}{2}", True),
    (r"\frac{5}{2}", r"2 \frac{1}{2}", True),
    ("1", r"2\frac{1}{2}", False),
    (r"2\frac{1}{2}", r"\frac{5}{2}", True),
    (r"2\frac{1}{2}", "2.5", True),
    (r"2\frac{1}{2}", "1", False),
    (r"2\frac{1}{2}", r"\frac{1}{2}", False),
    (r"3\frac{3}{4}", r"\frac{15}{4}", True),
    (r"3\frac{3}{4}", "3.75", True),
    (r"3\frac{3}{4}", r"\frac{9}{4}", False),
    (r"\frac{15}{4}", r"3\frac34", True),
    (r"\frac{9}{4}", r"3\frac{3}{4}", False),
    (r"-1\frac{1}{3}", r"-\frac{4}{3}", True),
    (r"-1\frac{1}{3}", r"-\frac{2}{3}", False),
    (r"-\frac{4}{3}", r"-1\frac{1}{3}", True),
    (r"\frac{7}{3}", r"2\frac{1}{3}", True),
    (r"\frac{7}{3}", r"2\frac{1}{2}", False),
    (r"5\frac{1}{4}", r"\frac{21}{4}", True),
    (r"5\frac{1}{4}", r"\frac{5}{4}", False),
    (r"6\frac{2}{3}", r"\frac{20}{3}", True),
    (r"6\frac{2}{3}", "6 2/3", True),
    (r"\frac{20}{3}", "6 2/3", True),
    ("4", "6 2/3", False),
    (r"1\frac{1}{2}", "1.5", True),
    (r"1\frac{1}{2}", r"\frac{1}{2}", False),
    (r"\frac{3}{2}", r"1\frac{1}{2}", True),
    ("4", r"8\frac{1}{2}", False),
    ("1", r"3\frac{1}{3}", False),
    (r"\frac{11}{4}", r"2\frac{3}{4}", True),
    (r"4\frac{1}{2}", "4.5", True),
)

_AVOGADRO = "602" + "0" * 21  # 6.02 x 10^23 written out
CURRENCY_UNITS_PERCENT = (
    ("18.9", r"\$18.90", True),
    ("18.90", "18.9", True),
    ("18.9", r"\$18.09", False),
    ("18.9", r"\$189", False),
    ("12.5", r"12.5\%", True),
    ("12.5", r"12.5 \%", True),
    ("12.5", r"125\%", False),
    ("12.5", r"1.25\%", False),
    (r"12.5\%", "12.5", True),
    ("50", r"50\%", True),
    ("50", "50 percent", True),
    ("50", r"5\%", False),
    ("5", r"5\text{ cm}", True),
    (r"5\text{ cm}", "5", True),
    ("5", r"5\text{ cm}^2", True),
    ("5", r"15\text{ cm}", False),
    ("30", r"30^\circ", True),
    (r"30^\circ", "30", True),
    ("30", r"30^{\circ}", True),
    ("30", r"30 \text{ degrees}", True),
    ("30", r"60^\circ", False),
    (_AVOGADRO, r"6.02\times10^{23}", True),
    (r"6.02 \times 10^{23}", _AVOGADRO, True),
    (_AVOGADRO, r"6.02\times10^{22}", False),
    ("0.75", r"\$0.75", True),
    ("0.75", r"\$7.50", False),
    ("1250", r"\$1,250", True),
    ("1250", r"\$1,250.00", True),
    ("1250", r"\$12.50", False),
    ("40", r"40\text{ km/h}", True),
    ("40", r"4\text{ km/h}", False),
    ("20", r"20\%", True),
    ("20", r"0.2\%", False),
    ("90", r"90^\circ", True),
    ("90", r"9^\circ", False),
    ("3.5", r"3.5\text{ hours}", True),
    ("3.5", r"35\text{ hours}", False),
    ("7", r"7\text{ inches}", True),
    ("150", r"\$150", True),
    ("150", r"150\text{ dollars}", True),
    ("150", r"\$1.50", False),
    ("45", r"\$45", True),
    ("25", r"25\%", True),
    ("2.50", r"\$2.50", True),
    ("60", r"60^\circ", True),
)

SCIENTIFIC = (
    (r"3.2\times 10^{-4}", "0.00032", True),
    ("0.00032", r"3.2 \times 10^{-4}", True),
    ("0.00032", r"3.2 \times 10^{4}", False),
    ("0.00032", "0.0032", False),
    (r"1.5\times10^6", "1500000", True),
    ("1500000", r"1.5 \cdot 10^6", True),
    ("1500000", "1.5e6", True),
    ("1500000", r"1.5\times10^{5}", False),
    (r"2\times10^{-3}", "0.002", True),
    ("0.002", r"2\cdot10^{-2}", False),
    ("10^{9}", "1000000000", True),
    ("1000000000", "10^9", True),
    ("1000000000", "1,000,000,000", True),
    ("1000000000", "10^8", False),
    (r"4.5 \times 10^{3}", "4500", True),
    ("4500", "4.5e3", True),
    ("4500", r"45 \times 10^{2}", True),
    ("4500", "4.5E-3", False),
    (r"9.8\times10^{-1}", "0.98", True),
    (r"9.8\times10^{-1}", "9.8", False),
    ("7000000000000", r"7\times 10^{12}", True),
    ("7000000000000", r"7\times 10^{11}", False),
    ("0.0005", r"5\times10^{-4}", True),
    (r"2.5\times10^{8}", "250000000", True),
)

TEXT_CHOICE = (
    (r"\text{(B)}", "B", True),
    (r"\text{(B)}", "(B)", True),
    (r"\text{(B)}", r"\textbf{(B)}", True),
    (r"\text{(B)}", r"\text{(C)}", False),
    (r"\text{(B)}", "D", False),
    ("B", r"\text{(B)}", True),
    ("B", r"\mathrm{(B)}", True),
    ("B", "(E)", False),
    (r"\text{(E)}", "E", True),
    (r"\text{(E)}", "A)", False),
    (r"\text{(A)}", "A)", True),
    (r"\text{Tuesday}", "Tuesday", True),
    (r"\text{Tuesday}", "tuesday", True),
    (r"\text{Tuesday}", r"\text{Thursday}", False),
    (r"\text{yes}", "Yes", True),
    (r"\text{yes}", "No", False),
    (r"\text{no}", r"\text{No}", True),
    (r"\text{even}", "even", True),
    (r"\text{even}", r"\text{odd}", False),
    (r"\text{neither}", "neither", True),
    (r"\text{neither}", r"\text{even}", False),
    (r"\text{A, C}", "A, C", True),
    (r"\text{A, C}", "A, B, C", False),
    (r"\text{Devon}", r"\text{Devon}", True),
    (r"\text{Devon}", "Alex", False),
    (r"\text{(D)}", "D", True),
    (r"\text{(D)}", "(D)", True),
    (r"\text{odd}", "odd", True),
)

DELIMITERS = (
    (r"\frac{3}{4}", r"\frac{3}{4}", True),
    (r"\frac{3}{4}", r"\frac{4}{3}", False),
    ("12", "12", True),
    ("12", "21", False),
    (r"2\sqrt{3}", r"\sqrt{12}", True),
    (r"2\sqrt{3}", r"2\sqrt{2}", False),
    ("(1, -2)", "(1, -2)", True),
    ("(1, -2)", "(-2, 1)", False),
    ("x^2+1", "1+x^2", True),
    ("x^2+1", "x^2-1", False),
    ("[0, 1)", "[0,1)", True),
    ("[0, 1)", "[0, 1]", False),
    (r"-\frac{1}{2}", "-0.5", True),
    (r"\pi", r"\pi", True),
    (r"\frac{\pi}{3}", r"\frac{\pi}{6}", False),
    (r"\begin{pmatrix} 1 \\ 0 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 0 \end{pmatrix}", True),
    ("7", "7.0", True),
    ("7", "-7", False),
    ("5", "5", True),
    (r"\frac{1}{4}", "0.25", True),
    (r"\sqrt{2}", r"\sqrt{2}", True),
)

# Plain-number base cases for extraction formats: each is rendered in three templates.
EXTRACTION_BASE = (
    ("24", "24", True),
    ("24", "42", False),
    ("7", "7", True),
    ("7", "7.0", True),
    ("7", "17", False),
    ("150", "150", True),
    ("150", "1,500", False),
    ("-4", "-4", True),
    ("-4", "4", False),
    ("3.5", "3.5", True),
    ("3.5", "35", False),
    ("1000", "1000", True),
    ("0", "0", True),
    ("0", "10", False),
    ("56", "56", True),
    ("2.25", "2.25", True),
    ("9", "9", True),
)

# --------------------------------------------------------------------------------------
# Written-out completions: (gold, completion, label).
# --------------------------------------------------------------------------------------

_SELF_CORRECT = (
    "First attempt: $\\boxed{12}$. Wait, I forgot to double it, so the total is "
    "$2 \\cdot 12 = 24$.\nTherefore, the final answer is $\\boxed{24}$."
)
_PENS = "There are 3 boxes with 8 pens each, so 24 pens. Then 5 are given away.\n#### 19"
_R1_FIX = "<think>\nMaybe it is 10? No: 4 + 5 = 9.\n</think>\n<answer>9</answer>"
_TRAYS = (
    "Each tray holds 3 rows of 5 cookies, so 3 × 5 = 15 cookies.\n"
    "Final Answer: The final answer is $15$. I hope it is correct."
)
_ROOTS = "The roots satisfy $x^2 - 4 = 0$ and we want the positive one. The answer is 2."
EXTRACTION_WRITTEN = (
    ("24", _SELF_CORRECT, True),
    ("12", _SELF_CORRECT, False),
    ("19", _PENS, True),
    ("24", _PENS, False),
    ("9", _R1_FIX, True),
    ("10", _R1_FIX, False),
    ("15", _TRAYS, True),
    ("5", _TRAYS, False),
    ("2", _ROOTS, True),
    ("4", _ROOTS, False),
    ("6", r"Since $2 \cdot 3 = 6$, the answer is $\boxed{6}$, as claimed.", True),
    ("8", r"Thus the answer is $\boxed{\boxed{8}}$.", True),
    ("42", "Answer: 42\n\nLet me double-check: 6 × 7 = 42, which matches.", True),
    ("5", "<think>\nAdd 2 and 3.\n</think>\n<answer>\\boxed{5}</answer>", True),
    ("7", r"The answer is $\boxed{ 7 }$.", True),
    ("11", "Adding the two groups gives eleven.\nThe answer is 11.\n\nAnswer: 11", True),
    ("0.5", "The probability is $\\frac{1}{2}$.\n#### 0.5", True),
    ("3", "So the answer is: 3", True),
    ("3", "So the answer is: 13", False),
    ("20", "The final answer is $\\boxed{20}$\n\n**Explanation:** 4 × 5 = 20.", True),
    ("4", "The final answer is $\\boxed{20}$\n\n**Explanation:** 4 × 5 = 20.", False),
)

TRUNCATED = (
    ("12", "Multiplying 3 by 4 gives the total.\nTherefore, the final answer is $\\boxed{12",
     False),
    ("12", "The two parts add up.\n\\[\\boxed{12", False),
    (r"\frac{3}{4}", "Reducing the fraction, so the answer is \\(\\boxed{\\frac{3}{4}", False),
    (r"\frac{3}{4}", "The probability is favourable over total: $\\boxed{\\frac{3}{", False),
    ("1234", "Summing the columns gives the total. The answer is $\\boxed{1,23", False),
    ("72", "Each of the 12 boxes holds 6 apples.\nThe answer is", False),
    ("72", "12 × 6 = 72.\nFinal Answer: The final answer is $72", False),
    ("72", "<think>\nLet me compute 12 × 6 = 72. So the answer should be 72, but let me", False),
    ("72", "<think>\n12 × 6 = 72.\n</think>\n<answer>72", False),
    ("72", "So the total number of apples is 12 × 6.\nTherefore, the final answer is $\\boxed{7",
     False),
    ("5", "Subtracting gives five.\n\\[\\boxed{5", False),
    ("(1, -2)", "Solving the system, the point is $\\boxed{(1, -2", False),
    ("2, -3", "Factoring, $(x-2)(x+3)=0$, so $x = \\boxed{2, -3", False),
    (r"\sqrt{2}", "By the Pythagorean theorem the diagonal is $\\boxed{\\sqrt{2", False),
    ("10", "Counting the handshakes one by one gives the total.\n#### 1", False),
    (r"\text{(B)}", "Only option B satisfies both conditions. The answer is $\\boxed{\\text{(B",
     False),
    ("9", "<think>\nThe sum of the digits is 9, and we need", False),
    # complete controls: nothing is cut off, the final answer is judged as usual
    ("12", "Multiplying 3 by 4 gives the total.\nTherefore, the final answer is $\\boxed{12}$",
     True),
    ("12", "The two parts add up, so \\boxed{12}", True),
    (r"\frac{3}{4}", "Reducing the fraction, the answer is $\\boxed{\\frac{3}{4}}$", True),
    ("72", "<think>\n12 × 6 = 72.\n</think>\n<answer>72</answer>", True),
    ("72", "12 × 6 = 72.\nFinal Answer: The final answer is $72$. I hope it is correct", True),
    ("5", "Subtracting gives five.\n\\[\\boxed{5}\\]", True),
    ("72", "So the total number of apples is 12 × 6.\nTherefore, the final answer is $\\boxed{76}$",
     False),
)

HEDGED = (
    ("3", "Both values satisfy the equation, so $x = \\boxed{3}$ or $x = \\boxed{5}$.", False),
    ("3", "Either value seems to work. The answer is 3 or 5.", False),
    ("3", "Checking both branches, the answer is $\\boxed{3 \\text{ or } 5}$.", False),
    ("12", "It is either 12 or 13; I am not sure which. The answer is 12 or 13.", False),
    (r"\frac{1}{2}", "So the ratio is $\\boxed{\\frac{1}{2}}$ or $\\boxed{2}$.", False),
    ("7", "Final Answer: The final answer is $7$ or $8$. I hope it is correct.", False),
    ("(1, 2)", "The point is $\\boxed{(1,2) \\text{ or } (2,1)}$.", False),
    ("4", "Rounding aside, the count is four.\nAnswer: 4 (or possibly 6)", False),
    ("A", "Options A and C both look plausible, so $\\boxed{A \\text{ or } C}$.", False),
    ("B", "The answer is (B) or (D).", False),
    ("10", "<think>\nCould be 10, could be 11.\n</think>\n<answer>10, 11</answer>", False),
    ("3", "The value of $x$ is $\\boxed{3, 5}$.", False),
    ("5", "The side length satisfies $s^2 = 25$, so $s = \\boxed{\\pm 5}$.", False),
    ("8", "The answer is probably 8, but it might be 9.\n#### 8 or 9", False),
    # controls: not hedges
    ("3, 5", "The solutions are $x = 3$ or $x = 5$, so the answer is $\\boxed{3, 5}$.", True),
    ("3, 5", "Factoring gives $(x-3)(x-5)=0$, so the answer is 3 or 5.", True),
    ("3", "So $x = \\boxed{3}$. Double-checking gives the same value, so again $\\boxed{3}$.",
     True),
    (r"\frac{1}{2}", "The probability is $\\boxed{\\frac{1}{2}}$ (equivalently $0.5$).", True),
    ("-2,2", "Taking square roots of both sides gives $x = \\boxed{\\pm 2}$.", True),
    ("12", "I first thought 13, but recounting gives 12. The answer is $\\boxed{12}$.", True),
    ("25", r"The side is $s = \pm 5$, but length is positive, so the area is $\boxed{25}$.", True),
)

NO_ANSWER = (
    ("72", "Janet starts with 16 eggs. She eats 3 and bakes with 4. "
     "Let me compute how many remain and multiply by 2.", False),
    ("72", "", False),
    ("5", "Therefore, the final answer is $\\boxed{}$.", False),
    ("5", "I'm not sure how to solve this problem.", False),
    (r"\frac{1}{2}", "<think>\nThe probability is favourable over total.\n</think>", False),
    ("3", "We need to find x such that 2x + 1 = 7. Subtract 1 from both sides.", False),
    ("24", "Let's think step by step. There are 4 rows of 6 chairs, so we multiply.", False),
    ("6", "The problem cannot be solved with the given information.", False),
    ("6", "Dividing the 12 cookies equally between the two friends.\nAnswer:", False),
    ("6", "<think>\nDivide 12 by 2.\n</think>\n<answer></answer>", False),
    ("12", "Final Answer: The final answer is $$. I hope it is correct.", False),
    ("9", "The digits of 81 are 8 and 1, and the question asks for their sum.", False),
    # controls: the final answer is stated explicitly in a concluding sentence
    ("72", "Betty has 16 + 56 = 72 dollars, so she has 72 dollars in total.", True),
    ("9", "Starting with 15 marbles and removing 6, 9 marbles remain in the bag.", True),
    (r"\frac{1}{2}", "Thus the probability of getting heads is $\\frac{1}{2}$.", True),
    ("4", "Subtracting 3 from both sides and dividing by 2, solving gives $x = 4$.", True),
    ("4", "Subtracting 3 from both sides and dividing by 2, solving gives $x = 5$.", False),
)

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
# Adversarial cases: all labelled False.  Long strings are built by code.
# --------------------------------------------------------------------------------------


def _box(s: str) -> str:
    return "\\boxed{" + s + "}"


def _adversarial() -> list[tuple[str, str]]:
    items = [
        ("5", _box("9^{9^{9^{9}}}")),
        ("4", _box("2^{2^{2^{2^{2^{2}}}}}")),
        ("2", _box("{" * 5000 + "1" + "}" * 5000)),
        ("7", _box("(" * 5000 + "1" + ")" * 5000)),
        ("3", _box("\\left(" * 2000 + "2" + "\\right)" * 2000)),
        ("6", "\\boxed{" * 5000 + "5" + "}" * 5000),
        ("5", _box("{" * 5000)),
        ("5", _box("x^{" * 3000 + "2" + "}" * 3000)),
        ("5", _box("1+" * 150_000 + "1")),  # about 300 KB
        ("5", "Let me think. " * 22_000 + _box("4")),  # about 300 KB of text
        ("5", _box("a" * 300_000)),
        (r"\frac{1}{3}", _box("0." + "3" * 100_000)),
        ("5", _box("6\x00")),
        ("5", _box("\x00" * 64)),
        ("12", "The answer is $\\boxed{1\x002\x003}$."),
        ("5", _box("\\def\\a{\\a\\a}\\a")),
        ("5", "\\def\\a{\\a\\a}\\a Therefore, the final answer is $" + _box("\\a") + "$."),
        ("5", _box("\\newcommand{\\x}{\\x}\\x")),
        (r"\frac{1}{2}", _box("\\renewcommand{\\frac}[2]{#2}\\frac{1}{2}")),
        ("5", _box("__import__('os').system('ls')")),
        ("5", _box("eval('2+3')")),
        ("0", _box("__import__('os').system('echo pwned')")),
        ("5", _box("exec(\"import os; os.system('ls')\")")),
        ("5", _box("().__class__.__base__.__subclasses__()")),
        ("5", _box("\\input{/etc/passwd}")),
        ("5", _box("\\include{/etc/shadow}")),
        ("5", _box("\\immediate\\write18{ls}")),
        ("5", _box("(10^{10})!")),
        ("5", _box("(10^{100})! - (10^{100})! + 6")),
        ("10^{20000}", _box("1" + "0" * 19_999 + "1")),  # 10^20000 + 1
        ("10^{20000}", _box("9" * 20_000)),  # 10^20000 - 1
        ("2^{64}", _box("18446744073709551617")),  # 2^64 + 1
        ("5", _box("9" * 50_000)),
        ("5", _box("5^{999999999999}")),
        ("5", _box("5!")),
        ("5", _box("5.000000000000000000001")),
        ("5", _box("5+10^{-10^{10}}")),
        ("5", _box("5 \\times 10^{10^{10}}")),
        ("1", _box("0.99999999999999999999999")),
        (r"\frac{1}{2}", _box("\\frac{1}{2}+10^{-30}")),
        (r"\frac{1}{2}", _box("\\left(\\frac{1}{2}\\right)^{10^{100}}")),
        ("5", _box("1e999999")),
        ("5", _box("\\sum_{n=1}^{10^{12}} n")),
        ("0", _box("\\frac{0}{0}")),
        ("1", _box("\\infty - \\infty + 1")),
        ("12", "Reading the digits in reverse order, the answer is \u202e21."),
    ]
    prefixes = ("Therefore, the final answer is $", "So the answer is $", "Answer: $")
    out = []
    for i, (gold, body) in enumerate(items):
        if body.startswith("\\boxed{"):
            body = prefixes[i % len(prefixes)] + body + "$" + ("." if i % 3 == 0 else "")
        out.append((gold, body))
    return out


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

    for gold, completion in _adversarial():
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
