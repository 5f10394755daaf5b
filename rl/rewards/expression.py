"""A small, bounded arithmetic-expression parser with exact evaluation.

Used by the `countdown` verifier (integers, + - * /, parentheses) and by the
`math` verifier (also names, known functions, powers, implicit
multiplication). Nothing here calls `eval`; the text is tokenised and parsed
by recursive descent into a tree of plain tuples (picklable, so the `math`
verifier can ship it to its sympy worker):

    ("num", Fraction, is_decimal)    a literal, always non-negative
    ("name", str)                    a variable or constant: "x", "pi", "theta"
    ("neg", node)                    unary minus
    ("sum", ((+1 | -1, node), ...))  n-ary sum, so long chains stay shallow
    ("prod", (("*" | "/", node), ...))
    ("pow", base, exponent)          right-associative; -2^2 == -(2^2)
    ("call", function, (arg, ...))

Limits (length, nesting depth, literal length, exponent size, result bit size)
are enforced while parsing/evaluating, so no input can hang, recurse too
deeply or build a gigantic integer. Every failure is an `ExpressionError`.
"""

from __future__ import annotations

import re
from fractions import Fraction

Node = tuple

MAX_LITERAL_CHARS = 400
MAX_EXPONENT = 1000
MAX_BITS = 20_000

# Unary functions (and `root(x, n)`, `log(x[, base])`) the math parser accepts.
FUNCTIONS: dict[str, tuple[int, ...]] = {
    "sqrt": (1,), "root": (2,), "abs": (1,), "exp": (1,), "ln": (1,), "log": (1, 2),
    "sin": (1,), "cos": (1,), "tan": (1,), "cot": (1,), "sec": (1,), "csc": (1,),
    "arcsin": (1,), "arccos": (1,), "arctan": (1,), "asin": (1,), "acos": (1,),
    "atan": (1,), "sinh": (1,), "cosh": (1,), "tanh": (1,),
}
GREEK = frozenset({
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta",
    "vartheta", "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau",
    "upsilon", "phi", "varphi", "chi", "psi", "omega",
})
CONSTANTS = frozenset({"pi", "infty"})
_MULTI_LETTER = frozenset(FUNCTIONS) | GREEK | CONSTANTS
_LONGEST_NAME = max(len(n) for n in _MULTI_LETTER)

# Unicode operator forms and full-width ASCII (U+FF01..U+FF5E) -> ASCII.
UNICODE_MAP: dict[int, str] = {
    0x00D7: "*", 0x00B7: "*", 0x2217: "*", 0x22C5: "*", 0x2219: "*",  # × · ∗ ⋅ ∙
    0x00F7: "/", 0x2215: "/", 0x2044: "/",  # ÷ ∕ ⁄
    0x2212: "-", 0x2013: "-", 0x2012: "-", 0xFE63: "-",  # − – ‒ ﹣
    0x00A0: " ", 0x2009: " ", 0x202F: " ", 0x3000: " ",  # non-breaking/thin/ideographic
}
UNICODE_MAP.update({c: chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)})

_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+")
_LETTERS = re.compile(r"[A-Za-z]+")
_WHITESPACE = frozenset(" \t\r\n")


class ExpressionError(ValueError):
    """The text is not a (supported, bounded) expression, or has no rational value."""


class DivisionByZero(ExpressionError):
    """The expression divides by zero."""


class TooLarge(ExpressionError):
    """An exponent or an intermediate value exceeds the size limits."""


def normalize_unicode(text: str) -> str:
    """Maps unicode operator forms and full-width characters to ASCII."""
    return text.translate(UNICODE_MAP)


def _split_letters(run: str) -> list[str]:
    """Splits a run of letters into known multi-letter names and single letters.

    Longest match first from the left: "sinx" -> sin, x; "pir" -> pi, r.
    """
    names, i = [], 0
    while i < len(run):
        for size in range(min(_LONGEST_NAME, len(run) - i), 1, -1):
            if run[i:i + size] in _MULTI_LETTER:
                names.append(run[i:i + size])
                i += size
                break
        else:
            names.append(run[i])
            i += 1
    return names


def tokenize(text: str, *, allow_names: bool, allow_power: bool) -> list[tuple[str, object]]:
    """Tokens ("num", (Fraction, is_decimal)), ("name", str), ("op", char)."""
    text = normalize_unicode(text)
    tokens: list[tuple[str, object]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in _WHITESPACE:
            i += 1
            continue
        number = _NUMBER.match(text, i)
        if number:
            literal = number.group()
            if len(literal) > MAX_LITERAL_CHARS:
                raise TooLarge("number literal too long")
            tokens.append(("num", (Fraction(literal), "." in literal)))
            i = number.end()
            continue
        if c == "*" and text.startswith("**", i) or c == "^":
            if not allow_power:
                raise ExpressionError("exponentiation is not allowed")
            tokens.append(("op", "^"))
            i += 2 if c == "*" else 1
            continue
        if c in "+-*/(),":
            tokens.append(("op", c))
            i += 1
            continue
        letters = _LETTERS.match(text, i) if allow_names else None
        if letters:
            tokens.extend(("name", name) for name in _split_letters(letters.group()))
            i = letters.end()
            continue
        raise ExpressionError(f"unexpected character {c!r} at {i}")
    return tokens


class _Parser:
    """Recursive descent over the token list; `depth` counts nesting."""

    def __init__(self, tokens: list[tuple[str, object]], *, allow_implicit: bool,
                 max_depth: int):
        self.tokens = tokens
        self.pos = 0
        self.allow_implicit = allow_implicit
        self.max_depth = max_depth

    def peek(self) -> tuple[str, object] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def at_op(self, ops: str) -> bool:
        tok = self.peek()
        return tok is not None and tok[0] == "op" and tok[1] in ops

    def take_op(self, op: str) -> None:
        if not self.at_op(op):
            raise ExpressionError(f"expected {op!r} at token {self.pos}")
        self.pos += 1

    def starts_primary(self) -> bool:
        tok = self.peek()
        return tok is not None and (tok[0] in ("num", "name") or tok == ("op", "("))

    def descend(self, depth: int) -> int:
        if depth >= self.max_depth:
            raise ExpressionError(f"nested deeper than {self.max_depth}")
        return depth + 1

    def expr(self, depth: int) -> Node:
        terms = [(1, self.term(depth))]
        while self.at_op("+-"):
            sign = 1 if self.tokens[self.pos][1] == "+" else -1
            self.pos += 1
            terms.append((sign, self.term(depth)))
        return terms[0][1] if len(terms) == 1 else ("sum", tuple(terms))

    def term(self, depth: int) -> Node:
        factors = [("*", self.unary(depth))]
        while True:
            if self.at_op("*/"):
                op = self.tokens[self.pos][1]
                self.pos += 1
                factors.append((op, self.unary(depth)))
            elif self.allow_implicit and self.starts_primary():
                factors.append(("*", self.power(depth)))
            else:
                break
        return factors[0][1] if len(factors) == 1 else ("prod", tuple(factors))

    def unary(self, depth: int) -> Node:
        if self.at_op("+-"):
            negative = self.tokens[self.pos][1] == "-"
            self.pos += 1
            operand = self.unary(self.descend(depth))
            return ("neg", operand) if negative else operand
        return self.power(depth)

    def power(self, depth: int) -> Node:
        base = self.primary(depth)
        if self.at_op("^"):
            self.pos += 1
            return ("pow", base, self.unary(self.descend(depth)))
        return base

    def primary(self, depth: int) -> Node:
        tok = self.peek()
        if tok is None:
            raise ExpressionError("unexpected end of expression")
        kind, value = tok
        if kind == "num":
            self.pos += 1
            number, is_decimal = value  # type: ignore[misc]
            return ("num", number, is_decimal)
        if kind == "name":
            self.pos += 1
            return self.call(value, depth) if value in FUNCTIONS else ("name", value)
        if value == "(":
            self.pos += 1
            inner = self.expr(self.descend(depth))
            self.take_op(")")
            return inner
        raise ExpressionError(f"unexpected {value!r} at token {self.pos}")

    def call(self, function: object, depth: int) -> Node:
        depth = self.descend(depth)
        exponent = None
        if self.at_op("^"):  # "sin^2 x" is (sin x)^2; "sin^{-1}" is not supported
            self.pos += 1
            exponent = self.primary(depth)
            if exponent[0] != "num" or exponent[1] <= 0 or exponent[1].denominator != 1:
                raise ExpressionError("only positive integer powers of a function")
        if self.at_op("("):
            self.pos += 1
            args = [self.expr(depth)]
            while self.at_op(","):
                self.pos += 1
                args.append(self.expr(depth))
            self.take_op(")")
        else:  # "sin x", "sqrt 2": the function applies to the next power
            args = [self.power(depth)]
        if len(args) not in FUNCTIONS[str(function)]:
            raise ExpressionError(f"{function} takes {FUNCTIONS[str(function)]} arguments")
        node = ("call", function, tuple(args))
        return node if exponent is None else ("pow", node, exponent)


def parse(text: str, *, allow_names: bool = False, allow_power: bool = False,
          allow_implicit: bool = False, max_length: int = 512, max_depth: int = 64) -> Node:
    """Parses `text` into a tree; ExpressionError if malformed or over a limit.

    With the defaults only numbers, + - * /, unary signs and parentheses are
    accepted (the countdown grammar).
    """
    if not isinstance(text, str):
        raise ExpressionError("not a string")
    if len(text) > max_length:
        raise TooLarge(f"longer than {max_length} characters")
    tokens = tokenize(text, allow_names=allow_names, allow_power=allow_power)
    if not tokens:
        raise ExpressionError("empty expression")
    parser = _Parser(tokens, allow_implicit=allow_implicit, max_depth=max_depth)
    tree = parser.expr(0)
    if parser.pos != len(tokens):
        raise ExpressionError(f"unexpected {tokens[parser.pos][1]!r} at token {parser.pos}")
    return tree


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise ExpressionError("non-integer exponent has no rational value")
    if abs(exponent) > MAX_EXPONENT:
        raise TooLarge(f"exponent {exponent} exceeds {MAX_EXPONENT}")
    bits = max(base.numerator.bit_length(), base.denominator.bit_length())
    if bits * abs(exponent) > MAX_BITS:
        raise TooLarge("power too large")
    if base == 0 and exponent < 0:
        raise DivisionByZero("zero to a negative power")
    return base ** int(exponent)


def evaluate(node: Node) -> Fraction:
    """The exact rational value of a tree without names or functions.

    Raises DivisionByZero, TooLarge, or ExpressionError (names, functions,
    non-integer powers).
    """
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "neg":
        return -evaluate(node[1])
    if kind == "sum":
        return sum((sign * evaluate(term) for sign, term in node[1]), Fraction(0))
    if kind == "prod":
        value = Fraction(1)
        for op, factor in node[1]:
            operand = evaluate(factor)
            if op == "*":
                value *= operand
            elif operand == 0:
                raise DivisionByZero("division by zero")
            else:
                value /= operand
            if max(value.numerator.bit_length(), value.denominator.bit_length()) > MAX_BITS:
                raise TooLarge("product too large")
        return value
    if kind == "pow":
        return _power(evaluate(node[1]), evaluate(node[2]))
    raise ExpressionError(f"{kind} {node[1]!r} has no rational value")


def is_constant(node: Node) -> bool:
    """True if the tree has no names and no function calls."""
    kind = node[0]
    if kind == "num":
        return True
    if kind in ("name", "call"):
        return False
    if kind == "neg":
        return is_constant(node[1])
    if kind in ("sum", "prod"):
        return all(is_constant(child) for _, child in node[1])
    return is_constant(node[1]) and is_constant(node[2])


def check_bounded(node: Node) -> None:
    """TooLarge if any power could build a huge number (for symbolic use).

    Every constant exponent must be at most MAX_EXPONENT in absolute value,
    and a constant base to a constant power must stay within MAX_BITS.
    Exponents containing names (2^x) are left to the caller's time limit.
    """
    kind = node[0]
    if kind in ("num", "name"):
        return
    if kind == "neg":
        check_bounded(node[1])
    elif kind in ("sum", "prod"):
        for _, child in node[1]:
            check_bounded(child)
    elif kind == "call":
        for arg in node[2]:
            check_bounded(arg)
    else:  # pow
        base, exponent = node[1], node[2]
        check_bounded(base)
        check_bounded(exponent)
        if is_constant(exponent):
            try:
                value = evaluate(exponent)
            except TooLarge:
                raise
            except ExpressionError:  # 1/0 or irrational: no size to check
                return
            if abs(value) > MAX_EXPONENT:
                raise TooLarge(f"exponent {value} exceeds {MAX_EXPONENT}")
            if is_constant(base) and value.denominator == 1:
                try:
                    _power(evaluate(base), value)
                except TooLarge:
                    raise
                except ExpressionError:
                    return


def literals(node: Node) -> list[tuple[Fraction, bool]]:
    """Every number literal as (value, directly negated), left to right."""
    found: list[tuple[Fraction, bool]] = []
    stack = [node]
    while stack:
        current = stack.pop()
        kind = current[0]
        if kind == "num":
            found.append((current[1], False))
        elif kind == "neg" and current[1][0] == "num":
            found.append((current[1][1], True))
        elif kind == "neg":
            stack.append(current[1])
        elif kind in ("sum", "prod"):
            stack.extend(child for _, child in reversed(current[1]))
        elif kind == "pow":
            stack.extend((current[2], current[1]))
        elif kind == "call":
            stack.extend(reversed(current[2]))
    return found
