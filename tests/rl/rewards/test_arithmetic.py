"""The arithmetic verifier: number extraction and exact comparison."""

from fractions import Fraction

import numpy as np
import pytest

from rl import rewards
from rl.rewards import arithmetic
from rl.rewards.common import RewardInputError

FS = {"format_score": 0.5}

CASES = [
    # (id, completion, reference, options, expected)
    ("plain", "The answer is 42", 42, {}, 1.0),
    ("tag", "<answer>42</answer>", "42", {}, 1.0),
    ("decimal-vs-fraction", "<answer>0.5</answer>", "1/2", {}, 1.0),
    ("fraction-vs-decimal", "<answer>1/2</answer>", "0.5", {}, 1.0),
    ("leading-zeros", "so it is 007", 7, {}, 1.0),
    ("thousands", "Total: 1,234 apples", 1234, {}, 1.0),
    ("thousands-reference", "Total: 1,234,567", "1,234,567", {}, 1.0),
    ("negative", "x = -42", "-42", {}, 1.0),
    ("unicode-minus", "x = −42", -42, {}, 1.0),
    ("subtraction-not-sign", "10-3", 3, {}, 1.0),
    ("subtraction-not-negative", "10-3", -3, FS, 0.5),
    ("letter-before-minus", "a-5", 5, {}, 1.0),
    ("paren-negative", "so (-5)", -5, {}, 1.0),
    ("fraction-ref", "<answer>3/4</answer>", Fraction(3, 4), {}, 1.0),
    ("unreduced-fraction", "<answer>6/8</answer>", "3/4", {}, 1.0),
    ("negative-fraction", "<answer>-3/4</answer>", "-0.75", {}, 1.0),
    ("zero-denominator", "<answer>3/0</answer>", 3, FS, 0.0),
    ("empty", "", 0, FS, 0.0),
    ("whitespace", "  \n\t ", 0, FS, 0.0),
    ("no-digits", "no idea", 0, FS, 0.0),
    ("empty-tag-ignores-text", "<answer></answer> 42", 42, FS, 0.0),
    ("tag-beats-text", "<answer>42</answer> then 17", 42, {}, 1.0),
    ("last-tag-wins", "<answer>41</answer><answer>42</answer>", 42, {}, 1.0),
    ("sentence-in-tag", "<answer>The result is $42$.</answer>", 42, {}, 1.0),
    ("dollars-in-tag", "<answer> $42$. </answer>", 42, {}, 1.0),
    ("arabic-indic", "٤٢", 42, FS, 0.0),
    ("fullwidth", "４２", 42, {}, 1.0),
    ("superscript-not-digit", "x²", 2, FS, 0.0),
    ("long-digit-run", "9" * 100_000, 9, FS, 0.0),
    ("big-literal", "1" + "0" * 5000, 10, FS, 0.0),
    ("power-text", "2^10000000 = ?", 10_000_000, {}, 1.0),
    ("tower-text", "9**9**9**9", 9, {}, 1.0),
    ("nul-byte", "42\x00", 42, {}, 1.0),
    ("emoji", "The answer is 42 🎉", 42, {}, 1.0),
    ("trailing-zero", "42.0", 42, {}, 1.0),
    ("wrong", "42.5", 42, FS, 0.5),
    ("decimal-ref", "pi is about 3.14159", "3.14159", {}, 1.0),
    ("leading-dot", "half: .5", "1/2", {}, 1.0),
    ("bad-grouping", "answer: 1,23", 123, FS, 0.5),
    ("negative-zero", "-0", 0, {}, 1.0),
    ("sentence-period", "so x=5.", 5, {}, 1.0),
    ("exponent-notation", "1e5", 100_000, FS, 0.5),
    ("many-open-tags", "<answer>" * 10_000 + "7", 7, {}, 1.0),
    ("float-ref", "0.1", 0.1, {}, 1.0),
    ("numpy-int-ref", "12", np.int64(12), {}, 1.0),
    ("unclosed-tag-text", "<answer>12", 12, {}, 1.0),
    ("date-like", "on 1/2/2020", 2020, {}, 1.0),
    ("dollar-dot-run", "<answer>" + "$." * 50_000 + "</answer>", 1, FS, 0.0),
]


@pytest.mark.parametrize("completion, reference, options, expected",
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_arithmetic_table(completion, reference, options, expected):
    got = rewards.score("arithmetic", [completion], [reference], **options)
    assert got.dtype == np.float32 and got.shape == (1,)
    assert got[0] == pytest.approx(expected)


def test_arithmetic_table_is_large_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("text, value", [
    ("-3/4", Fraction(-3, 4)), ("+5", Fraction(5)), (" $1,000$. ", Fraction(1000)),
    ("1/2/3", None), ("abc", None), ("", None), ("1/0", None),
])
def test_parse_whole(text, value):
    assert arithmetic.parse_whole(text) == value


def test_length_caps_stop_long_literals_before_any_work(monkeypatch):
    """What bounds the verifier's time on the long table rows: a literal over
    MAX_LITERAL_CHARS is no number (no huge int conversion), and an answer over
    twice that is rejected before its quadratic strip-"$."-loop starts."""
    def must_not_run(text):
        raise AssertionError(f"parse_whole went past its length cap ({len(text)} chars)")

    cap = arithmetic.MAX_LITERAL_CHARS
    assert arithmetic.to_fraction("9" * cap) == int("9" * cap)
    assert arithmetic.to_fraction("9" * (cap + 1)) is None
    assert arithmetic.to_fraction("1" + "0" * 5000) is None  # the big-literal row
    assert arithmetic.extract_answer("9" * 100_000) is None  # the long-digit-run row
    monkeypatch.setattr(arithmetic, "normalize_unicode", must_not_run)
    assert arithmetic.parse_whole("$." * 50_000) is None  # the dollar-dot-run row


@pytest.mark.parametrize("reference", [None, "abc", "", True, float("nan"), [1], "1/0"])
def test_bad_reference_raises(reference):
    with pytest.raises(RewardInputError):
        rewards.score("arithmetic", ["1"], [reference])
