"""The countdown verifier: extraction, the arithmetic grammar, number rules, limits."""

from fractions import Fraction

import numpy as np
import pytest

from rl import rewards
from rl.rewards import countdown, expression
from rl.rewards.common import RewardInputError

REF = {"target": 24, "numbers": [2, 3, 4, 5]}
FS = {"format_score": 0.1}  # makes "parsed but wrong" visible as 0.1
ALL = {"require_all": True}

CASES = [
    # (id, completion, reference, options, expected)
    ("tag", "<answer>2*3*4</answer>", REF, {}, 1.0),
    ("require-all", "<answer>4*(5+3-2)</answer>", REF, ALL, 1.0),
    ("require-all-missing", "<answer>2*3*4</answer>", REF, ALL, 0.0),
    ("require-all-missing-fs", "<answer>2*3*4</answer>", REF, {**ALL, **FS}, 0.1),
    ("think-then-times", "<think>try</think>\n<answer>(5 + 3 - 2) × 4</answer>", REF, {}, 1.0),
    ("unicode-minus", "<answer>4 × (5 + 3 − 2)</answer>", REF, {}, 1.0),
    ("unicode-divide", "<answer>(5+3-2) ÷ 2 * 4 * 2</answer>", REF, FS, 0.1),  # 2 reused
    ("middle-dot", "<answer>(5+3-2)·4</answer>", REF, {}, 1.0),
    ("number-not-given", "<answer>96 ÷ 4</answer>", REF, FS, 0.1),
    ("equation", "<answer>2*3*4 = 24</answer>", REF, {}, 1.0),
    ("equation-wrong-rhs", "<answer>2*3*4 = 25</answer>", REF, FS, 0.1),
    ("equation-negative-rhs", "<answer>2*3*4 = -24</answer>", REF, FS, 0.1),
    ("two-equals", "<answer>2*3*4 = 24 = 24</answer>", REF, FS, 0.0),
    ("double-equals", "<answer>2*3*4 == 24</answer>", REF, FS, 0.0),
    ("rhs-words", "<answer>2*3*4 = twenty four</answer>", REF, FS, 0.0),
    ("empty-lhs", "<answer>= 24</answer>", REF, FS, 0.0),
    ("reused-number", "<answer>3*4*2*2/2*2</answer>", REF, FS, 0.1),
    ("wrong-value", "<answer>2+3+4+5</answer>", REF, FS, 0.1),
    ("unbalanced-open", "<answer>(2*3*4</answer>", REF, FS, 0.0),
    ("unbalanced-close", "<answer>2*3*4)</answer>", REF, FS, 0.0),
    ("division-by-zero", "<answer>2*3*4/(5-5)</answer>", REF, FS, 0.0),
    ("division-by-zero-expr", "<answer>24/(3-3)</answer>", REF, FS, 0.0),
    ("caret", "<answer>2^3*3</answer>", REF, FS, 0.0),
    ("double-star", "<answer>2**3*3</answer>", REF, FS, 0.0),
    ("tower", "<answer>9**9**9**9</answer>", REF, FS, 0.0),
    ("huge-power", "<answer>2^10000000</answer>", REF, FS, 0.0),
    ("empty", "", REF, FS, 0.0),
    ("whitespace", "   \n\t  \n", REF, FS, 0.0),
    ("empty-tag", "<answer></answer>", REF, FS, 0.0),
    ("blank-tag", "<answer>   </answer>", REF, FS, 0.0),
    ("nested-60", "<answer>" + "(" * 60 + "2*3*4" + ")" * 60 + "</answer>", REF, {}, 1.0),
    ("nested-100", "<answer>" + "(" * 100 + "2*3*4" + ")" * 100 + "</answer>", REF, FS, 0.0),
    ("nested-10k", "<answer>" + "(" * 10_000 + "2" + ")" * 10_000 + "</answer>", REF, FS, 0.0),
    ("unary-chain", "<answer>" + "-" * 200 + "24</answer>", REF, FS, 0.0),
    ("long-100k", "1+" * 50_000 + "1", REF, FS, 0.0),
    ("fullwidth-digits", "<answer>２*３*４</answer>", REF, {}, 1.0),
    ("fullwidth-ops", "<answer>（２＋３－１）＊４＋２</answer>", REF, FS, 0.1),  # 1 not given
    ("arabic-indic-digits", "<answer>٢*٣*٤</answer>", REF, FS, 0.0),
    ("superscript", "<answer>2*3*4²</answer>", REF, FS, 0.0),
    ("nul-byte", "<answer>2*3*4\x00</answer>", REF, FS, 0.0),
    ("emoji", "<answer>2*3*4 🎉</answer>", REF, FS, 0.0),
    ("negated-literals", "<answer>-2*-3*4</answer>", REF, {}, 1.0),
    ("unary-plus", "<answer>+2*3*4</answer>", REF, {}, 1.0),
    ("double-negation", "<answer>--2*3*4</answer>", REF, {}, 1.0),
    ("last-tag-wins", "<answer>2*3*4</answer> no, <answer>5*5-1</answer>", REF, FS, 0.1),
    ("decimal-literal", "<answer>2*3*4.0</answer>", REF, {}, 1.0),
    ("decimal-not-given", "<answer>4.5*4+2*3</answer>", REF, FS, 0.1),
    ("implicit-multiplication", "<answer>2(3*4)</answer>", REF, FS, 0.0),
    ("letters", "<answer>x*3*4</answer>", REF, FS, 0.0),
    ("prose-last-line", "I could not find it.", REF, FS, 0.0),
    ("last-line", "Let me see.\n2 * 3 * 4\n\n", REF, {}, 1.0),
    ("last-line-equation", "Trying:\n(5 - 3 + 4) * 4 = 24\n", REF, FS, 0.1),  # 4 reused
    ("closing-tag-only", "2*3*4</answer>", REF, FS, 0.0),
    ("opening-tag-only", "<answer>2*3*4", REF, FS, 0.0),
    ("spaces-in-tag", "<answer>  2 * 3 * 4  </answer>", REF, {}, 1.0),
    ("exact-fractions", "<answer>6/(1-3/4)</answer>", {"target": 24, "numbers": [1, 3, 4, 6]},
     ALL, 1.0),
    ("negative-given", "<answer>-3+2</answer>", {"target": -1, "numbers": [-3, 2]}, ALL, 1.0),
    ("negative-given-both", "<answer>3 - -3</answer>", {"target": 6, "numbers": [3, -3]},
     ALL, 1.0),
    ("huge-literal", "<answer>" + "9" * 300 + "</answer>", REF, FS, 0.1),
    ("too-long-literal", "<answer>" + "9" * 600 + "</answer>", REF, FS, 0.0),
    ("many-tags-unclosed", "<answer>" * 10_000 + "2*3*4", REF, FS, 0.0),
]


@pytest.mark.parametrize("completion, reference, options, expected",
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_countdown_table(completion, reference, options, expected):
    got = rewards.score("countdown", [completion], [reference], **options)
    assert got.dtype == np.float32 and got.shape == (1,)
    assert got[0] == pytest.approx(expected)
    assert countdown.verify(completion, reference, **options) == pytest.approx(expected)


CASE = {case[0]: case[1:] for case in CASES}


@pytest.mark.parametrize("name", ["nested-10k", "long-100k", "too-long-literal",
                                  "many-tags-unclosed"])
def test_long_candidates_are_rejected_before_parsing(monkeypatch, name):
    """The length cap, not the parser, bounds the time on these table rows."""
    completion, reference, options, _ = CASE[name]
    assert len(countdown.extract_candidate(completion)) > countdown.MAX_CANDIDATE_CHARS

    def must_not_run(*args, **kwargs):
        raise AssertionError("parsed a candidate over MAX_CANDIDATE_CHARS")

    monkeypatch.setattr(countdown, "parse", must_not_run)
    assert countdown.verify(completion, reference, **options) == 0.0


@pytest.mark.parametrize("name, error", [
    ("nested-100", "nested deeper than 64"), ("unary-chain", "nested deeper than 64"),
    ("tower", "exponentiation is not allowed"), ("huge-power", "exponentiation is not allowed"),
])
def test_deep_or_power_candidates_stop_at_a_parser_limit(name, error):
    """Depth and power limits end these table rows before any big evaluation."""
    completion, reference, options, expected = CASE[name]
    candidate = countdown.extract_candidate(completion)
    with pytest.raises(expression.ExpressionError, match=error):
        expression.parse(candidate, max_length=countdown.MAX_CANDIDATE_CHARS,
                         max_depth=countdown.MAX_DEPTH)
    assert countdown.verify(completion, reference, **options) == expected == 0.0


def test_countdown_table_is_large_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("used, numbers, require_all, ok", [
    ([(Fraction(3), True), (Fraction(3), False)], [3, -3], True, True),
    ([(Fraction(3), False), (Fraction(3), False)], [3, -3], False, False),
    ([(Fraction(2), False)], [2, 2], True, False),
    ([], [1], False, True),
])
def test_number_multiset(used, numbers, require_all, ok):
    numbers = [Fraction(n) for n in numbers]
    assert countdown.uses_allowed_numbers(used, numbers, require_all) is ok


@pytest.mark.parametrize("reference", [None, {"target": 3}, {"numbers": [1]}, [24, [1, 2]],
                                       {"target": "abc", "numbers": [1]}])
def test_bad_reference_raises(reference):
    with pytest.raises(RewardInputError):
        rewards.score("countdown", ["1"], [reference])


def test_bad_option_values_raise():
    with pytest.raises(RewardInputError):
        rewards.score("countdown", ["1"], [REF], require_all="yes")
    with pytest.raises(RewardInputError):
        rewards.score("countdown", ["1"], [REF], format_score=float("nan"))
