"""Adversarial completions for the math-verifier agreement set (tests/rl/rewards/math_pairs.py):
answers built to exhaust a parser or an evaluator (deep nesting, huge numbers, macro
loops, code injection, NUL bytes, bidirectional text). Every one is labelled False; the
long strings are built by code.
"""

from __future__ import annotations


def _box(s: str) -> str:
    return "\\boxed{" + s + "}"


def adversarial() -> list[tuple[str, str]]:
    """(gold, completion) pairs, every one labelled False by `math_pairs`."""
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
