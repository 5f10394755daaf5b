"""The math verifier: its fast parser, the library fallback, the size guards."""

import numpy as np
import pytest

from rl import rewards
from rl.rewards import common, extract, latex, math_answer
from rl.rewards.common import RewardInputError


def B(content: str) -> str:
    return "\\boxed{" + content + "}"


CASES = [
    # (id, completion, reference, expected)
    ("int", B("42"), "42", 1.0),
    ("frac-vs-decimal", B(r"\frac{1}{2}"), "0.5", 1.0),
    ("dfrac", B(r"\dfrac{1}{2}"), r"\frac{1}{2}", 1.0),
    ("frac-shorthand", B(r"\frac12"), "1/2", 1.0),
    ("nested-frac", B(r"\frac{\frac{1}{2}}{\frac{3}{4}}"), r"\frac23", 1.0),
    ("last-box-wins", "$\\boxed{3}$. Later:\n\\boxed{4}", "4", 1.0),
    ("earlier-box-loses", "$\\boxed{3}$. Later:\n\\boxed{4}", "3", 0.0),
    ("boxes-disagree-hedged", r"$\boxed{3}$ or $\boxed{4}$", "4", 0.0),
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
    ("log", B(r"\ln(e^2)"), "2", 1.0),
    ("log-product", B(r"\log(100)"), r"2\log(10)", 1.0),
    ("trig-identity", B(r"\sin^2 x + \cos^2 x"), "1", 1.0),
    ("text-choice", B(r"\text{(B)}"), "(B)", 1.0),
    ("words", B("yes"), "no", 0.0),
    ("letters-not-product", B("ABD"), "DBA", 0.0),
    ("unsupported-command", B(r"\unknowncmd{3}"), "3", 0.0),
    ("subscript-string-equal", B("a_1"), "a_1", 1.0),
    ("unicode-minus", B("-7"), "\u22127", 1.0),
    ("fullwidth-digit", B("\uff17"), "7", 1.0),
    ("empty", "", "1", 0.0),
    ("whitespace", "  \n\t ", "1", 0.0),
    ("long-100k", "x" * 100_000, "1", 0.0),
    ("long-answer", B("1+" * 600 + "1"), "601", 0.0),  # over 1000 characters
    ("deep-braces-10k", B("{" * 10_000 + "1" + "}" * 10_000), "1", 0.0),
    ("deep-parens-10k", B("(" * 10_000 + "1" + ")" * 10_000), "1", 0.0),
    ("parens-30", B("(" * 30 + "1" + ")" * 30), "1", 1.0),
    ("parens-100", B("(" * 100 + "1" + ")" * 100), "1", 0.0),  # deeper than either parser
    ("many-unclosed-boxes", r"\boxed{" * 10_000 + "1", "1", 0.0),
    ("nul-byte", B("1\x00"), "1", 0.0),
    ("emoji", B("\U0001f389"), "1", 0.0),
    # answer shapes the fast parser settles itself
    ("solutions-unordered", B("2, -3"), "-3, 2", 1.0),
    ("solutions-or", "So $x = 2$ or $x = -3$.\nThe answer is $x = 2$ or $x = -3$", "-3, 2", 0.0),
    ("solutions-or-boxed", B(r"2 \text{ or } -3"), "-3, 2", 1.0),
    ("solutions-missing-root", B("2"), "-3, 2", 0.0),
    ("pm", B(r"\pm 5"), "5, -5", 1.0),
    ("pm-hedge", B(r"\pm 5"), "5", 0.0),
    ("set-unordered", B(r"\{3, 1, 2\}"), r"\{1,2,3\}", 1.0),
    ("mixed-number", B(r"2\frac{1}{2}"), r"\frac52", 1.0),
    ("mixed-number-not-product", B(r"2\frac{1}{2}"), "1", 0.0),
    ("factorial", B("10!"), "3628800", 1.0),
    ("binomial", B(r"\binom{10}{3}"), "120", 1.0),
    ("repeating-decimal", B(r"0.\overline{3}"), r"\frac13", 1.0),
    ("e-notation", B("1.5e6"), "1500000", 1.0),
    ("times-ten", B(r"6.02\times10^{23}"), "602000000000000000000000", 1.0),
    ("thin-space-thousands", B(r"1\,000\,000"), "1000000", 1.0),
    ("currency", B(r"\$18.90"), "18.9", 1.0),
    ("unit-word", "The answer is 9 cups.", "9", 1.0),
    ("choice", B("A)"), r"\text{(A)}", 1.0),
    ("choice-wrong", B("(C)"), r"\text{(A)}", 0.0),
    ("inequality-as-interval", B("-3 < x < 3"), "(-3, 3)", 1.0),
    ("one-sided-interval", B(r"x \ge 2"), r"[2, \infty)", 1.0),
    ("interval-brackets-differ", B("x < 1"), r"(-\infty, 1]", 0.0),
    ("other-variable", B("y = 4"), "x = 4", 0.0),
    ("near-miss-decimal", B("5.000000000000000000001"), "5", 0.0),
    ("huge-factorial", B(r"(10^{10})!"), "5", 0.0),
    ("hedge-word", "Answer: 4 (or possibly 6)", "4", 0.0),
    ("macro-definition", B(r"\def\a{5}\a"), "5", 0.0),
    ("code", B("__import__('os').system('true')"), "0", 0.0),
    # shapes left to the library (math-verify, in a worker)
    ("matrix", B(r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}"),
     r"\begin{bmatrix}1\\2\end{bmatrix}", 1.0),
    ("union-order", B(r"(3,\infty)\cup(-\infty,2)"), r"(-\infty,2)\cup(3,\infty)", 1.0),
    ("equation-sides", B("2x+1=y"), "y=2x+1", 1.0),
    ("unicode-pi", B("π/2"), r"\frac{\pi}{2}", 1.0),
    ("unicode-sqrt", B("3√2"), r"3\sqrt{2}", 1.0),
]


# Inputs the fast parser must settle without the library (size guards, numbers,
# strings, hedges): judge() returns a decision, never None.
SETTLED = {"long-100k", "long-answer", "deep-braces-10k", "deep-parens-10k", "tower-latex",
           "tower-python", "huge-power", "huge-power-plain", "huge-symbolic-power",
           "nul-byte", "solutions-unordered", "pm", "pm-hedge", "set-unordered", "mixed-number",
           "mixed-number-not-product", "factorial", "binomial", "repeating-decimal",
           "e-notation", "times-ten", "thin-space-thousands", "currency", "choice",
           "choice-wrong", "inequality-as-interval", "one-sided-interval",
           "interval-brackets-differ", "other-variable", "near-miss-decimal", "huge-factorial",
           "hedge-word", "macro-definition", "code", "words", "letters-not-product"}
# The table checks answers, not the time limit (tests/rl/rewards/test_pool.py does):
# the library's first parse in a fresh worker can take a second on a busy machine.
TABLE_TIMEOUT_S = 120.0


@pytest.mark.parametrize("name, completion, reference, expected", CASES,
                         ids=[case[0] for case in CASES])
def test_math_table(name, completion, reference, expected):
    got = rewards.score("math", [completion], [reference], timeout_s=TABLE_TIMEOUT_S)
    assert got.dtype == np.float32 and got.shape == (1,)
    assert got[0] == expected
    if name in SETTLED:
        answer = extract.extract(completion)
        assert answer is None or math_answer.judge(answer, reference) is not None


def test_math_table_is_large_enough():
    assert len(CASES) >= 100


def test_in_process_call_escalates_only_what_it_cannot_settle():
    verify = rewards.get("math")
    assert verify(B("0.5"), "1/2") == 1.0  # settled here
    assert verify(B("2x+2"), "2(x+1)") == 1.0  # a polynomial identity: settled here too
    with pytest.raises(common.Escalate):
        verify(B(r"\sqrt{8}"), r"2\sqrt{2}")
    assert verify(B(r"\sqrt{8}"), r"2\sqrt{2}", fallback=False) == 0.0


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_with_mixed_items_is_float32(workers):
    got = rewards.score("math", [B("1"), "no answer", B(r"\frac{\sqrt{3}}{3}")],
                        ["1", "1", r"\frac{1}{\sqrt{3}}"], timeout_s=TABLE_TIMEOUT_S,
                        workers=workers)
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
    (None, {}), ("", {}), ("  ", {}), ("1", {"fallback": 1}), ("1", {"search": "thoughts"}),
    ("1", {"answer_formats": "boxed,latex"}),
])
@pytest.mark.parametrize("workers", [0, 2])
def test_bad_reference_or_option_raises(reference, options, workers):
    with pytest.raises(RewardInputError):
        rewards.score("math", [B("1")], [reference], workers=workers, **options)
