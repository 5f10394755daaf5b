"""The format verifier: the default pattern, custom patterns, long inputs."""

import numpy as np
import pytest

from rl import rewards
from rl.rewards import format as format_verifier
from rl.rewards.common import RewardInputError

DIGITS = {"pattern": r"<answer>\d+</answer>"}

CASES = [
    # (id, completion, options, expected)
    ("answer-only", "<answer>42</answer>", {}, 1.0),
    ("think-answer", "<think>reasoning</think><answer>42</answer>", {}, 1.0),
    ("newlines-between", "<think>r</think>\n\n<answer>42</answer>\n", {}, 1.0),
    ("space-between", "<think>a</think> <answer>1</answer>", {}, 1.0),
    ("outer-whitespace", "  \n<answer>42</answer>  ", {}, 1.0),
    ("empty-think", "<think></think><answer>1</answer>", {}, 1.0),
    ("multiline-answer", "<answer>multi\nline\nanswer</answer>", {}, 1.0),
    ("padded-answer", "<answer> 42 </answer>", {}, 1.0),
    ("emoji-answer", "<answer>\U0001f389</answer>", {}, 1.0),
    ("nul-answer", "<answer>\x00</answer>", {}, 1.0),
    ("empty-answer", "<answer></answer>", {}, 0.0),
    ("blank-answer", "<answer>   </answer>", {}, 0.0),
    ("newline-answer", "<answer>\n</answer>", {}, 0.0),
    ("two-answers", "<answer>1</answer><answer>2</answer>", {}, 0.0),
    ("two-answers-newline", "<answer>1</answer>\n<answer>2</answer>", {}, 0.0),
    ("nested-answers", "<answer><answer>1</answer></answer>", {}, 0.0),
    ("prefix-text", "text <answer>42</answer>", {}, 0.0),
    ("suffix-text", "<answer>42</answer> trailing", {}, 0.0),
    ("think-only", "<think>a</think>", {}, 0.0),
    ("two-thinks", "<think>a</think><think>b</think><answer>1</answer>", {}, 0.0),
    ("text-between", "<think>a</think>x<answer>1</answer>", {}, 0.0),
    ("answer-inside-think", "<think><answer>1</answer></think><answer>2</answer>", {}, 0.0),
    ("answer-only-inside-think", "<think>a<answer>1</answer></think>", {}, 0.0),
    ("stray-close-think", "<think>a</think><answer>1</answer></think>", {}, 0.0),
    ("answer-before-think", "<answer>1</answer><think>a</think>", {}, 0.0),
    ("unclosed-answer", "<answer>42", {}, 0.0),
    ("unopened-answer", "42</answer>", {}, 0.0),
    ("unclosed-think", "<think>a <answer>1</answer>", {}, 0.0),
    ("uppercase-tags", "<ANSWER>42</ANSWER>", {}, 0.0),
    ("spaced-tag", "< answer>42</answer>", {}, 0.0),
    ("empty", "", {}, 0.0),
    ("whitespace", "   \n\t", {}, 0.0),
    ("just-under-limit", "<answer>" + "a" * 19_000 + "</answer>", {}, 1.0),
    ("over-limit", "<answer>" + "a" * 100_000 + "</answer>", {}, 0.0),
    ("many-open-thinks", "<think>" * 2_800 + "</think><answer>1</answer>", {}, 0.0),
    ("many-open-answers", "<answer>" * 2_400 + "</answer>", {}, 0.0),
    ("long-think-no-answer", "<think>" + "a" * 19_900 + "</think>", {}, 0.0),
    ("custom-pattern-match", "<answer>12</answer>", DIGITS, 1.0),
    ("custom-pattern-miss", "<answer>a</answer>", DIGITS, 0.0),
    ("custom-limit", "<answer>12</answer>", {"max_chars": 10}, 0.0),
]


@pytest.mark.parametrize("completion, options, expected",
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_format_table(completion, options, expected):
    got = rewards.score("format", [completion], [None], **options)
    assert got.dtype == np.float32 and got.shape == (1,)
    assert got[0] == expected


def test_length_cap_decides_before_matching():
    """What bounds the time of any pattern, a user's backtracking one included:
    over max_chars the completion scores 0.0 even where the pattern matches it."""
    text = "<answer>" + "a" * 100_000 + "</answer>"  # the over-limit row
    assert format_verifier.verify(text, max_chars=len(text)) == 1.0
    assert format_verifier.verify(text) == 0.0 and len(text) > format_verifier.MAX_CHARS
    assert format_verifier.verify(text, pattern=".*", max_chars=len(text) - 1) == 0.0


def test_format_table_is_large_enough():
    assert len(CASES) >= 30


def test_references_may_be_omitted():
    got = rewards.score("format", ["<answer>1</answer>", "1"], None)
    np.testing.assert_array_equal(got, [1, 0])


@pytest.mark.parametrize("text", [
    "<think>" + "<answer>" * 2_000,
    "<think>" + "</think>" * 2_000,
    "<answer>" + " " * 19_900,
    "<think>" + "a" * 9_000 + "<answer>" + "b" * 9_000,
    "<think></think>" * 1_300,
])
def test_default_pattern_is_fast_on_adversarial_inputs(text):
    """Inputs aimed at the default pattern's loops (runs of tags, long bodies). It
    matches in linear time: under 1 ms each when measured; the time is not asserted,
    wall clocks vary too much between machines. They stay under the length cap,
    so the pattern, not the cap, rejects them."""
    assert len(text) <= format_verifier.MAX_CHARS
    assert format_verifier.verify(text, pattern=".*") == 1.0  # the cap lets it through
    assert format_verifier.verify(text) == 0.0


@pytest.mark.parametrize("options", [{"pattern": "("}, {"pattern": 3}, {"max_chars": -1},
                                     {"max_chars": True}])
def test_bad_options_raise(options):
    with pytest.raises(RewardInputError):
        rewards.score("format", ["<answer>1</answer>"], [None], **options)
