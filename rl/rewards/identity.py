"""Symbolic answers the fast parser can settle exactly: rational expressions, equations, matrices.

`expression_equal(a, b)` decides whether two rational expressions in single-letter
variables (polynomials, quotients, integer powers: no functions, no π/e/i) are
the same function by evaluating both, exactly (`fractions.Fraction`), at random
rational points: equal at `TRIALS` points -> True; different at one point
where both are defined -> False (a proof). A wrong "True" needs every point
to hit a root of the difference: by the Schwartz-Zippel lemma at most
degree / |S| per point, with S the ~10^12 rationals the points are drawn from
(`random.SystemRandom`: an answer cannot be crafted to vanish at points chosen
in advance). Anything else (functions, constants, a power too large to evaluate)
is None: the library decides.

`equation_equal(a, b)` says True when the two equations' sides differ by the
same expression up to sign (sides swapped, terms moved: `y = x^2 - 4x + 3` and
`x^2 - 4x + 3 = y`), False when (lhs - rhs) of one is not a constant multiple
of the other's, and None for a multiple other than +-1 (a scaled equation:
the library's call).

`matrix_equal(a, b)` compares `pmatrix`/`bmatrix`/`matrix`/`array` environments
entry by entry with `answer_values.number`: True/False for numeric entries of
equal shape, False for different shapes, None otherwise.
"""

from __future__ import annotations

import math
import random
import re
from fractions import Fraction

from rl.rewards import answer_values as av
from rl.rewards import latex
from rl.rewards.expression import DivisionByZero, ExpressionError, Node, TooLarge, evaluate

TRIALS = 3
MAX_ATTEMPTS = 12  # points tried (some may divide by zero) before giving up
_RANDOM = random.SystemRandom()
_NOT_RATIONAL = frozenset({"pi", "infty", "e", "i"})
_MATRIX = re.compile(r"\\begin\{(pmatrix|bmatrix|matrix|array)\}(?:\{[^{}]*\})?(.*)"
                     r"\\end\{\1\}", re.DOTALL)
_DELIMITERS = re.compile(r"\\(?:left|right)\s*[()\[\].]?|\\[dt]?displaystyle")


def _tree(text: str) -> Node | None:
    """The rational expression of `text` in single-letter variables, else None."""
    try:
        tree = av.tree(text, names=True)
    except (latex.LatexError, ExpressionError):
        return None
    stack = [tree]
    while stack:
        node = stack.pop()
        kind = node[0]
        if kind == "call" or kind == "name" and node[1] in _NOT_RATIONAL:
            return None
        if kind in ("neg",):
            stack.append(node[1])
        elif kind in ("sum", "prod"):
            stack.extend(child for _, child in node[1])
        elif kind == "pow":
            stack.extend((node[1], node[2]))
    return tree


def _names(tree: Node) -> set[str]:
    kind = tree[0]
    if kind == "name":
        return {tree[1]}
    if kind == "num":
        return set()
    if kind == "neg":
        return _names(tree[1])
    if kind in ("sum", "prod"):
        return set().union(*(_names(child) for _, child in tree[1]))
    return _names(tree[1]) | _names(tree[2])


def _at(tree: Node, point: dict[str, Fraction]) -> Node:
    kind = tree[0]
    if kind == "name":
        return ("num", point[tree[1]], False)
    if kind == "num":
        return tree
    if kind == "neg":
        return ("neg", _at(tree[1], point))
    if kind in ("sum", "prod"):
        return (kind, tuple((op, _at(child, point)) for op, child in tree[1]))
    return ("pow", _at(tree[1], point), _at(tree[2], point))


class _Undecided(Exception):  # noqa: N818 - a signal, not an error
    """A value too large to evaluate: the random-point test cannot decide."""


def _samples(a: Node, b: Node):
    """(a, b) evaluated at fresh random rational points where both are defined, at most
    MAX_ATTEMPTS points tried; raises _Undecided for a value too large to build."""
    names = sorted(_names(a) | _names(b))
    for _ in range(MAX_ATTEMPTS):
        point = {n: Fraction(_RANDOM.randint(-10**6, 10**6), _RANDOM.randint(1, 10**6))
                 for n in names}
        try:
            yield evaluate(_at(a, point)), evaluate(_at(b, point))
        except DivisionByZero:
            continue
        except (TooLarge, ExpressionError):
            raise _Undecided from None


def _identical(a: Node, b: Node, sign: int = 1) -> bool | None:
    """True if a == sign * b as functions (at TRIALS random points), False if not, None
    if undecided (values too large, or no point where both are defined)."""
    agreed = 0
    try:
        for va, vb in _samples(a, b):
            if va != sign * vb:
                return False
            agreed += 1
            if agreed == TRIALS:
                return True
    except _Undecided:
        pass
    return None


def expression_equal(a: str, b: str) -> bool | None:
    """None unless both sides have variables (a number against letters may be units)."""
    tree_a, tree_b = _tree(a), _tree(b)
    if tree_a is None or tree_b is None or not _names(tree_a) or not _names(tree_b):
        return None
    return _identical(tree_a, tree_b)


def equation_equal(a: str, b: str) -> bool | None:
    sides_a, sides_b = a.split("="), b.split("=")
    if len(sides_a) != 2 or len(sides_b) != 2:
        return None
    trees = [_tree(side) for side in (*sides_a, *sides_b)]
    if any(t is None for t in trees):
        return None
    diff_a = ("sum", ((1, trees[0]), (-1, trees[1])))
    diff_b = ("sum", ((1, trees[2]), (-1, trees[3])))
    if _identical(diff_a, diff_b) or _identical(diff_a, diff_b, sign=-1):
        return True
    return False if _ratio_varies(diff_a, diff_b) else None


def _ratio_varies(a: Node, b: Node) -> bool:
    """True if a / b takes two different values at random points: the equations a = 0 and
    b = 0 are not multiples of each other (not the same equation, scaled)."""
    ratios = set()
    try:
        for va, vb in _samples(a, b):
            if vb != 0:
                ratios.add(va / vb)
            if len(ratios) > 1:
                return True
    except _Undecided:
        pass
    return False


_FLOAT_FUNCTIONS = {
    "sqrt": math.sqrt, "root": lambda x, n: math.copysign(abs(x) ** (1 / n), x),
    "abs": abs, "exp": math.exp, "ln": math.log, "log": math.log, "sin": math.sin,
    "cos": math.cos, "tan": math.tan, "arcsin": math.asin, "arccos": math.acos,
    "arctan": math.atan, "asin": math.asin, "acos": math.acos, "atan": math.atan,
    "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh}
_FLOAT_CONSTANTS = {"pi": math.pi, "e": math.e}


def _float(node: Node) -> float:
    """A constant tree's value in floating point (ValueError/ArithmeticError/KeyError if
    it has a variable, a function not listed, or no real value)."""
    kind = node[0]
    if kind == "num":
        return float(node[1])
    if kind == "name":
        return _FLOAT_CONSTANTS[node[1]]
    if kind == "neg":
        return -_float(node[1])
    if kind == "sum":
        return math.fsum(sign * _float(child) for sign, child in node[1])
    if kind == "prod":
        value = 1.0
        for op, child in node[1]:
            value = value * _float(child) if op == "*" else value / _float(child)
        return value
    if kind == "pow":
        value = _float(node[1]) ** _float(node[2])
        if isinstance(value, complex):
            raise ValueError("complex power")
        return value
    return float(_FLOAT_FUNCTIONS[node[1]](*(_float(arg) for arg in node[2])))


def constants_differ(a: list[str], b: list[str]) -> bool:
    """True if some pair of constant elements (radicals, π, e, functions, no variables)
    differs numerically, by more than a relative 1e-9 (1e-6 when either is written
    with a decimal point: a rounded answer is the library's call). Only ever used to
    say "different": floating point can tell values apart, not prove them equal."""
    for x, y in zip(a, b, strict=True):
        try:
            fx, fy = (_float(av.tree(t, names=True)) for t in (x, y))
        except (latex.LatexError, ExpressionError, ValueError, ArithmeticError, KeyError,
                TypeError):
            continue
        if not (math.isfinite(fx) and math.isfinite(fy)):
            continue
        tolerance = 1e-6 if "." in x + y else 1e-9
        if abs(fx - fy) > tolerance * max(1.0, abs(fx), abs(fy)):
            return True
    return False


def _matrix(text: str) -> list[list[str]] | None:
    text = _DELIMITERS.sub("", text).strip().strip("$").strip()
    match = _MATRIX.fullmatch(text)
    if match is None:
        return None
    rows = [row for row in re.split(r"\\\\", match.group(2)) if row.strip()]
    return [[cell.strip() for cell in row.split("&")] for row in rows]


def matrix_equal(a: str, b: str) -> bool | None:
    rows_a, rows_b = _matrix(a), _matrix(b)
    if rows_a is None or rows_b is None:
        return None
    if [len(r) for r in rows_a] != [len(r) for r in rows_b]:
        return False
    try:
        cells = [(av.number(av.normalize(x)), av.number(av.normalize(y)))
                 for ra, rb in zip(rows_a, rows_b, strict=True)
                 for x, y in zip(ra, rb, strict=True)]
    except TooLarge:
        return False
    if any(x is None or y is None for x, y in cells):
        return None
    return all(av.same(x, y) for x, y in cells)  # type: ignore[arg-type]
