"""Answer values for the `math` verifier's fast parser: numbers, lists, intervals.

`normalize` rewrites an answer string (unicode symbols, "or"-lists, inequalities
as intervals, unit words after a number, then `latex.clean`); `split` cuts it into
elements ("ordered" tuples and intervals with their brackets, "unordered" lists,
sets and `\\pm`); `number` gives an element's exact value (integers, decimals,
fractions, mixed numbers, powers, `n!`, binomials, repeating decimals, e-notation,
infinity) or None; `same` compares two values (exactly, or within a relative 1e-6
when a rounded decimal meets a value with no finite decimal expansion);
`unbounded` spots answers too large to compute.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from rl.rewards import latex
from rl.rewards.expression import (
    CONSTANTS,
    FUNCTIONS,
    GREEK,
    ExpressionError,
    Node,
    TooLarge,
    check_bounded,
    evaluate,
    parse,
)

MAX_ANSWER_CHARS = 1000
MAX_ELEMENTS = 32
MAX_FACTORIAL = 300
REL_TOL = Fraction(1, 10**6)
_OR = re.compile(r"\\text\{\s*(?:or|and)\s*\}|\s\bor\b\s|\\lor(?![A-Za-z])|\\quad")
_MIXED = re.compile(r"(-?)([0-9]+)\s*(?:\\frac\{([0-9]+)\}\{([0-9]+)\}|\\frac([0-9])([0-9])"
                    r"|\s([0-9]+)/([0-9]+))")
_FACTORIAL = re.compile(r"\(?([0-9]{1,3})\)?!")
_BINOM = re.compile(r"\\[dt]?binom\{([0-9]{1,3})\}\{([0-9]{1,3})\}|C\(([0-9]{1,3}),([0-9]{1,3})\)"
                    r"|\{([0-9]{1,3})\\choose([0-9]{1,3})\}")
_REPEATING = re.compile(r"(-?)([0-9]*)\.([0-9]*)\\overline\{([0-9]{1,20})\}")
_E_NOTATION = re.compile(r"(-?[0-9]+(?:\.[0-9]+)?)[eE]([+-]?[0-9]{1,3})")
_NUMBER_WORDS = re.compile(r"(-?[0-9][0-9.,/]*)\s+[A-Za-z][A-Za-z ]*")
_LESS = r"(<|\\lt(?![A-Za-z])|\\leq?(?![A-Za-z]))"
_CHAIN = re.compile(rf"(.+?){_LESS}\s*[A-Za-z]\s*{_LESS}(.+)")
_ONE_SIDED = re.compile(r"[A-Za-z]\s*(<|>|\\[lg]t(?![A-Za-z])|\\[lg]eq?(?![A-Za-z]))(.+)")
_STRICT = ("<", ">", "\\lt", "\\gt")
_INFINITY = re.compile(r"([+-]?)\s*\\infty")
MATH_WORDS = frozenset(FUNCTIONS) | GREEK | CONSTANTS | {"and", "or", "i", "e"}
_UNICODE = {"π": "\\pi ", "∞": "\\infty ", "√": "\\sqrt ", "½": "\\frac{1}{2}",
            "¼": "\\frac{1}{4}", "¾": "\\frac{3}{4}", "²": "^2", "³": "^3", "∪": "\\cup ",
            "≤": "\\le ", "≥": "\\ge ", "≠": "\\neq ", "\\varnothing": "\\emptyset ",
            "\\{\\}": "\\emptyset "}
_UNICODE_RE = re.compile("|".join(map(re.escape, _UNICODE)))


def unicode(text: str) -> str:
    return _UNICODE_RE.sub(lambda m: _UNICODE[m.group()], text)


def normalize(text: str) -> str:
    """`latex.clean` after unicode symbols and "or"-lists are rewritten, and unit words
    after a plain number dropped ("9 cups" -> "9")."""
    text = latex.clean(_OR.sub(", ", unicode(text)))
    text = interval(text)
    words = _NUMBER_WORDS.fullmatch(text)
    if words and all(len(w) > 1 and w.lower() not in MATH_WORDS
                     for w in text[words.end(1):].split()):
        return words.group(1)
    return text


def interval(text: str) -> str:
    """An inequality in one variable as interval notation ("-3 < x \\le 3" -> "(-3, 3]",
    "x > 2" -> "(2, \\infty)"); other text unchanged."""
    chain = _CHAIN.fullmatch(text)
    if chain:
        low, op_low, op_high, high = chain.groups()
        left = "(" if op_low in _STRICT else "["
        right = ")" if op_high in _STRICT else "]"
        return f"{left}{low.strip()}, {high.strip()}{right}"
    one = _ONE_SIDED.fullmatch(text)
    if one and "=" not in text:
        op, bound = one.group(1), one.group(2).strip()
        if op in ("<", "\\lt", "\\le", "\\leq"):
            return "(-\\infty, " + bound + (")" if op in _STRICT else "]")
        return ("(" if op in _STRICT else "[") + bound + ", \\infty)"
    return text


def special(text: str) -> Fraction | float | None:
    """Mixed numbers, n!, binomials, repeating decimals, e-notation written alone,
    exactly; +-infinity as a float; else None."""
    match = _INFINITY.fullmatch(text)
    if match:
        return float("-inf") if match.group(1) == "-" else float("inf")
    match = _MIXED.fullmatch(text)
    if match:
        sign, whole = match.group(1), int(match.group(2))
        num, den = next((int(a), int(b)) for a, b in zip(match.groups()[2::2],
                                                         match.groups()[3::2], strict=True)
                        if a is not None)
        if den == 0 or num >= den:  # "3\frac{5}{4}" is not a mixed number
            return None
        value = whole + Fraction(num, den)
        return -value if sign else value
    match = _FACTORIAL.fullmatch(text)
    if match and int(match.group(1)) <= MAX_FACTORIAL:
        return Fraction(math.factorial(int(match.group(1))))
    match = _BINOM.fullmatch(text)
    if match:
        n, k = (int(g) for g in match.groups() if g is not None)
        return Fraction(math.comb(n, k))
    match = _REPEATING.fullmatch(text)
    if match:
        sign, whole, fixed, cycle = match.groups()
        value = Fraction(int(whole or 0)) + (Fraction(int(fixed), 10 ** len(fixed)) if fixed
                                             else 0)
        value += Fraction(int(cycle), (10 ** len(cycle) - 1) * 10 ** len(fixed))
        return -value if sign else value
    match = _E_NOTATION.fullmatch(text)
    if match:
        return Fraction(match.group(1)) * Fraction(10) ** int(match.group(2))
    return None


def tree(text: str, *, names: bool) -> Node:
    """The supported LaTeX subset of `text` parsed (`latex.to_plain`, then
    `expression.parse` with powers and implicit products; single-letter variables
    with `names`). Raises LatexError / ExpressionError (TooLarge among them)."""
    return parse(latex.to_plain(text), allow_names=names, allow_power=True,
                 allow_implicit=True, max_length=4 * MAX_ANSWER_CHARS, max_depth=64)


def number(text: str) -> tuple[Fraction, bool] | None:
    """(exact value, written with a decimal point) of a purely numeric answer, else None.

    Raises TooLarge for a number too large to build (the answer is rejected)."""
    value = special(text)
    if value is not None:
        return value, False
    try:
        node = tree(text, names=False)
    except TooLarge:
        raise
    except (latex.LatexError, ExpressionError):
        return None
    check_bounded(node)
    try:
        return evaluate(node), has_decimal(node)
    except TooLarge:
        raise
    except ExpressionError:
        return None


def has_decimal(node: Node) -> bool:
    kind = node[0]
    if kind == "num":
        return bool(node[2])
    if kind == "neg":
        return has_decimal(node[1])
    if kind in ("sum", "prod"):
        return any(has_decimal(child) for _, child in node[1])
    if kind == "pow":
        return has_decimal(node[1]) or has_decimal(node[2])
    return False


def terminates(value: Fraction) -> bool:
    """True if `value` has a finite decimal expansion (denominator 2^a 5^b)."""
    d = value.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def same(a: tuple[Fraction, bool], b: tuple[Fraction, bool]) -> bool:
    """Exactly equal; or, when one side is a decimal and the other's exact value has no
    finite decimal expansion (1/3 against 0.333333), within a relative 1e-6."""
    if a[0] == b[0]:
        return True
    if isinstance(a[0], float) or isinstance(b[0], float):  # an infinity
        return False
    rounded = (a[1] and not terminates(b[0])) or (b[1] and not terminates(a[0]))
    return rounded and abs(a[0] - b[0]) <= REL_TOL * max(abs(a[0]), abs(b[0]))


def big_factorial(text: str) -> bool:
    """True if a `!` applies to a power, a number over MAX_FACTORIAL or a group with one."""
    for match in re.finditer(r"!", text):
        i = match.start()
        if i and text[i - 1] in ")}":
            close, depth, j = text[i - 1], 0, i - 1
            opening = "(" if close == ")" else "{"
            while j >= 0:
                depth += (text[j] == close) - (text[j] == opening)
                if depth == 0:
                    break
                j -= 1
            argument = text[max(j, 0):i]
        else:
            argument = re.search(r"[0-9A-Za-z]*$", text[:i]).group()  # type: ignore[union-attr]
        if "^" in argument or re.search(r"[0-9]{4,}", argument) \
                or argument.isdigit() and int(argument) > MAX_FACTORIAL:
            return True
    return False


def unbounded(text: str) -> bool:
    """True if the answer builds a number too large to compute (checked before the
    library sees it): a huge factorial, or a power the size guards reject."""
    if big_factorial(text):
        return True
    try:
        check_bounded(tree(text, names=True))
    except TooLarge:
        return True
    except (latex.LatexError, ExpressionError):
        pass
    return False


def split(text: str) -> tuple[str, list[str]]:
    """(kind, elements): kind "ordered" for (..)/[..] tuples and intervals (with the
    brackets), "unordered" for bare lists, sets, "or"-lists and a \\pm; "one" otherwise."""
    text = text.strip(", ")
    if text.count("\\pm") == 1 and "," not in text:
        left, right = (part.strip() for part in text.split("\\pm"))
        if not right:
            return "one", [text]
        return "unordered", ([f"{left}+{right}", f"{left}-{right}"] if left
                             else [right, f"-{right}"])
    split = latex.split_tuple(text)
    if split is None:
        return "one", [text]
    brackets, elements = split
    elements = [latex.clean(e) for e in elements]
    if brackets in ("", "{}"):
        return "unordered", elements
    return "ordered" + brackets, elements


def values(elements: list[str]) -> list[tuple[Fraction, bool]] | None:
    values = []
    for element in elements:
        value = number(element)
        if value is None:
            return None
        values.append(value)
    return values


def match_unordered(a: list[tuple[Fraction, bool]], b: list[tuple[Fraction, bool]]) -> bool:
    if len(a) != len(b):
        return False
    left = list(b)
    for value in a:
        hit = next((i for i, other in enumerate(left) if same(value, other)), None)
        if hit is None:
            return False
        left.pop(hit)
    return True
