"""The math verifier: extraction, string/numeric/symbolic equivalence, time limits."""

import numpy as np
import pytest

from rl import rewards
from rl.rewards import latex, math_verify
from rl.rewards.common import RewardInputError
from rl.rewards.sympy_worker import SympyWorker


def B(content: str) -> str:
    return "\\boxed{" + content + "}"


CASES = [
    # (id, completion, reference, expected)
    ("int", B("42"), "42", 1.0),
    ("frac-vs-decimal", B(r"\frac{1}{2}"), "0.5", 1.0),
    ("dfrac", B(r"\dfrac{1}{2}"), r"\frac{1}{2}", 1.0),
    ("frac-shorthand", B(r"\frac12"), "1/2", 1.0),
    ("nested-frac", B(r"\frac{\frac{1}{2}}{\frac{3}{4}}"), r"\frac23", 1.0),
    ("last-box-wins", r"$\boxed{3}$ and later \boxed{4}", "4", 1.0),
    ("earlier-box-loses", r"$\boxed{3}$ and later \boxed{4}", "3", 0.0),
    ("last-box-symbol", B(r"\frac{1}{2}") + " so " + B("x"), "1/2", 0.0),
    ("nested-boxes", B(B("5")), "5", 1.0),
    ("unclosed-box", r"\boxed{5", "5", 0.0),
    ("unclosed-outer-box", r"\boxed{\frac{1}{2}", "1/2", 0.0),
    ("empty-box", B(""), "1", 0.0),
    ("fbox", r"\fbox{7}", "7", 1.0),
    ("sqrt-rationalised", B(r"\frac{\sqrt{2}}{2}"), r"\frac{1}{\sqrt{2}}", 1.0),
    ("factor-out", B("2x+2"), "2(x+1)", 1.0),
    ("difference-of-squares", B("x^2-1"), "(x-1)(x+1)", 1.0),
    ("square", B("x^{2}+2x+1"), "(x+1)^2", 1.0),
    ("braced-exponent", B("x^{2}"), "x^2", 1.0),
    ("half-x", B(r"\frac{x}{2}"), "0.5x", 1.0),
    ("sqrt-x-squared", B(r"\sqrt{x^2}"), "x", 0.0),
    ("tuple", B("(1, 2)"), r"\left(1,2\right)", 1.0),
    ("tuple-order", B("(2, 1)"), "(1,2)", 0.0),
    ("interval-kind", B("[1, 2)"), "(1,2)", 0.0),
    ("tuple-vs-bare-list", B(r"\left( 1, 2 \right)"), "1, 2", 1.0),
    ("set", B(r"\{1, 2\}"), r"\{1,2\}", 1.0),
    ("tuple-elementwise-symbolic", B(r"(\frac{1}{2}, 2x+2)"), "(0.5, 2(x+1))", 1.0),
    ("answer-is", "The answer is 7.", "7", 1.0),
    ("answer-is-latex", r"The answer is $\frac{3}{4}$.", "0.75", 1.0),
    ("answer-is-colon-boxed-ref", "So the final answer is: 12", r"\boxed{12}", 1.0),
    ("answer-is-dollar", "The answer is 1/2$.", "0.5", 1.0),
    ("answer-is-nothing", "The answer is", "1", 0.0),
    ("answer-is-sentence", "The answer is 5. Because 2+3=5.", "5", 1.0),
    ("answer-is-dollars-then-text", r"The answer is $\frac{1}{2}$ since x=1.", "0.5", 1.0),
    ("answer-is-parens-delimiters", r"The answer is \(\frac{1}{2}\).", "0.5", 1.0),
    ("answer-is-last-wins", "The answer is 3. No wait, the answer is 4", "4", 1.0),
    ("box-beats-answer-is", r"The answer is 3, i.e. \boxed{5}", "5", 1.0),
    ("degrees", B(r"90^\circ"), "90", 1.0),
    ("percent", B(r"50\%"), "50", 1.0),
    ("percent-not-fraction", B(r"10\%"), "0.1", 0.0),
    ("units", B(r"5\text{ cm}"), "5", 1.0),
    ("square-units", B(r"5\text{ cm}^2"), "5", 1.0),
    ("dollars", B(r"\$5"), "5", 1.0),
    ("assignment", B("x = 3"), "3", 1.0),
    ("thousands", B("1,234"), "1234", 1.0),
    ("pi-string", B(r"2\pi"), r"2\pi", 1.0),
    ("pi-symbolic", B(r"\pi \cdot 2"), r"2\pi", 1.0),
    ("pi-approx-too-coarse", B("3.14"), r"\pi", 0.0),
    ("decimal-within-tol", B("0.3333333"), r"\frac{1}{3}", 1.0),
    ("decimal-outside-tol", B("0.333"), r"\frac13", 0.0),
    ("frac-vs-rounded", B(r"\frac{1}{3}"), "0.33", 0.0),
    ("integers-exact", B("1000001"), "1000000", 0.0),
    ("negative-frac", B(r"-\frac{3}{4}"), "-0.75", 1.0),
    ("negative-numerator", B(r"\frac{-3}{4}"), r"-\frac34", 1.0),
    ("cube-root", B(r"\sqrt[3]{8}"), "2", 1.0),
    ("sqrt-8", B(r"\sqrt{8}"), r"2\sqrt{2}", 1.0),
    ("negative-power", B("2^{-1}"), "0.5", 1.0),
    ("power-braced", B("2^{10}"), "1024", 1.0),
    ("power-plain", B("2^10"), "1024", 1.0),
    ("tower-latex", B("9^{9^{9}}"), "1", 0.0),
    ("tower-python", B("9**9**9**9"), "1", 0.0),
    ("huge-power", B("10^{100000}"), "1", 0.0),
    ("huge-power-plain", B("2^10000000"), "1", 0.0),
    ("huge-symbolic-power", B("x^{10000}"), "x^{10001}", 0.0),
    ("zero-negative-power", B("0^{-1}"), "1", 0.0),
    ("division-by-zero", B("1/0"), "1", 0.0),
    ("infinity", B(r"\infty"), r"\infty", 1.0),
    ("complex", B("3+4i"), "4i+3", 1.0),
    ("euler", B(r"e^{i\pi}"), "-1", 1.0),
    ("log", B(r"\ln(e^2)"), "2", 1.0),
    ("log-product", B(r"\log(100)"), r"2\log(10)", 1.0),
    ("trig-identity", B(r"\sin^2 x + \cos^2 x"), "1", 1.0),
    ("text-choice", B(r"\text{(B)}"), "(B)", 1.0),
    ("words", B("yes"), "no", 0.0),
    ("letters-not-product", B("ABD"), "DBA", 0.0),
    ("unsupported-command", B(r"\unknowncmd{3}"), "3", 0.0),
    ("subscript-string-equal", B("a_1"), "a_1", 1.0),
    ("membership", B(r"x \in [0, 1]"), "[0,1]", 0.0),
    ("unicode-minus", B("-7"), "\u22127", 1.0),
    ("fullwidth-digit", B("\uff17"), "7", 1.0),
    ("arabic-indic-digit", B("\u0667"), "7", 0.0),
    ("empty", "", "1", 0.0),
    ("whitespace", "  \n\t ", "1", 0.0),
    ("long-100k", "x" * 100_000, "1", 0.0),
    ("long-answer", B("1+" * 600 + "1"), "601", 0.0),  # over 1000 characters
    ("deep-braces-10k", B("{" * 10_000 + "1" + "}" * 10_000), "1", 0.0),
    ("deep-parens-10k", B("(" * 10_000 + "1" + ")" * 10_000), "1", 0.0),
    ("parens-30", B("(" * 30 + "1" + ")" * 30), "1", 1.0),
    ("parens-100", B("(" * 100 + "1" + ")" * 100), "1", 0.0),  # over the depth limit
    ("many-unclosed-boxes", r"\boxed{" * 10_000 + "1", "1", 0.0),
    ("nul-byte", B("1\x00"), "1", 1.0),
    ("emoji", B("\U0001f389"), "1", 0.0),
]


# Inputs that would be slow or unbounded in sympy: the length, depth and size
# guards must decide them before the worker is asked.
GUARDED = {"long-100k", "long-answer", "deep-braces-10k", "deep-parens-10k", "parens-100",
           "many-unclosed-boxes", "tower-latex", "tower-python", "huge-power",
           "huge-power-plain", "huge-symbolic-power"}
# The table checks answers, not the time limit (test_timeout_returns_zero_and_worker_recovers
# does): sympy's first simplify in a process takes ~0.7 s here, so the default 2 s could
# expire on a slower or busier machine and turn an expected 1.0 into 0.0.
TABLE_TIMEOUT_S = 120.0


class _CountingWorker:
    """The real worker, counting requests and the ones it did not answer (a timeout
    or a crash stops the child, so it is no longer running afterwards)."""

    def __init__(self, worker):
        self.worker, self.requests, self.unanswered = worker, 0, 0

    def equal(self, pairs, approximate, timeout_s):
        result = self.worker.equal(pairs, approximate, timeout_s)
        self.requests += 1
        self.unanswered += not self.worker.running
        return result


@pytest.mark.parametrize("name, completion, reference, expected", CASES,
                         ids=[case[0] for case in CASES])
def test_math_table(monkeypatch, name, completion, reference, expected):
    worker = _CountingWorker(math_verify.WORKER)
    monkeypatch.setattr(math_verify, "WORKER", worker)
    got = rewards.score("math", [completion], [reference], timeout_s=TABLE_TIMEOUT_S)
    assert got.dtype == np.float32 and got.shape == (1,)
    assert got[0] == expected
    assert worker.unanswered == 0  # decided by sympy's answer, never by a timeout
    if name in GUARDED:
        assert worker.requests == 0


def test_math_table_is_large_enough():
    assert len(CASES) >= 30


class _RecordingWorker:
    def __init__(self):
        self.calls = []

    def equal(self, pairs, approximate, timeout_s):
        self.calls.append(pairs)
        return True


def test_string_and_numeric_checks_do_not_start_the_worker(monkeypatch):
    worker = _RecordingWorker()
    monkeypatch.setattr(math_verify, "WORKER", worker)
    completions = [B(r"\frac{1}{2}"), B("0.5"), B("3"), "The answer is 2^{10}.", B("(1, 2)"),
                   B(r"9^{9^{9}}"), B("x^{10000}"), B("yes")]
    references = ["0.5", "1/2", "4", "1024", "(1,2)", "1", "x", "no"]
    got = rewards.score("math", completions, references)
    np.testing.assert_array_equal(got, [1, 1, 0, 1, 1, 0, 0, 0])
    assert worker.calls == []
    assert rewards.score("math", [B("2x+2")], ["2(x+1)"])[0] == 1.0
    assert len(worker.calls) == 1


def test_use_sympy_false_skips_symbolic(monkeypatch):
    worker = _RecordingWorker()
    monkeypatch.setattr(math_verify, "WORKER", worker)
    got = rewards.score("math", [B("2x+2"), B("0.5")], ["2(x+1)", "1/2"], use_sympy=False)
    np.testing.assert_array_equal(got, [0, 1])
    assert worker.calls == []


def test_timeout_returns_zero_and_worker_recovers(monkeypatch):
    worker = SympyWorker()
    monkeypatch.setattr(math_verify, "WORKER", worker)
    try:
        # simplify() takes far longer than 0.5 s on this pair.
        slow = B("(x+1)^{100}(y+2)^{100}")
        got = rewards.score("math", [slow], ["(x+2)^{100}(y+1)^{100}"], timeout_s=0.5)
        assert got[0] == 0.0
        assert not worker.running  # killed at the time limit, not left computing
        assert worker.starts == 1
        # The next item starts a fresh worker and is checked normally.
        got = rewards.score("math", [B(r"\sqrt{8}"), B("2x")], [r"2\sqrt{2}", "x+x"],
                            timeout_s=30.0)
        np.testing.assert_array_equal(got, [1, 1])
        assert worker.starts == 2 and worker.running
    finally:
        worker.close()
    assert not worker.running


def test_batch_with_mixed_items_is_float32():
    got = rewards.score("math", [B("1"), "no answer", B(r"\frac{\sqrt{3}}{3}")],
                        ["1", "1", r"\frac{1}{\sqrt{3}}"], timeout_s=TABLE_TIMEOUT_S)
    assert got.dtype == np.float32 and got.shape == (3,)
    np.testing.assert_array_equal(got, [1, 0, 1])


@pytest.mark.parametrize("text, content", [
    (r"a \boxed{1} b \boxed{\frac{1}{2}} c", r"\frac{1}{2}"),
    (r"\boxed{\boxed{5}}", "5"),
    (r"\boxed 5 and more", "5"),
    (r"\boxed{5", None),
    (r"\boxedx", None),
    (r"\boxed{a \{ b}", r"a \{ b"),
    ("no box", None),
])
def test_last_boxed(text, content):
    assert latex.last_boxed(text) == content


@pytest.mark.parametrize("text, plain", [
    (r"\frac{1}{2}", "((1)/(2))"),
    (r"\sqrt[3]{x}", " root(x,3)"),
    (r"2\times10^{3}", "2*10^(3)"),
    (r"\left(x\right)", None),  # removed by clean(), not by to_plain()
    (r"x_1", None),
    (r"\pm 1", None),
])
def test_to_plain(text, plain):
    if plain is None:
        with pytest.raises(latex.LatexError):
            latex.to_plain(text)
    else:
        assert latex.to_plain(text) == plain


@pytest.mark.parametrize("reference, options", [
    (None, {}), ("", {}), ("  ", {}), ("1", {"timeout_s": 0}), ("1", {"timeout_s": "2"}),
    ("1", {"use_sympy": 1}),
])
def test_bad_reference_or_option_raises(reference, options):
    with pytest.raises(RewardInputError):
        rewards.score("math", [B("1")], [reference], **options)
