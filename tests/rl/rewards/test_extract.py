"""Answer extraction: every format, priorities, the search region, cut-off and hedged answers."""

import pytest

from rl.rewards import extract
from rl.rewards.common import RewardInputError

CASES = [
    # (id, completion, expected answer)
    ("boxed", r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
    ("fbox", r"Thus \fbox{7}.", "7"),
    ("boxed-nested", r"\boxed{\boxed{5}}", "5"),
    ("boxed-unclosed", r"The answer is 5. Therefore $\boxed{5", None),
    ("boxed-hedged-same-line", r"$x = \boxed{3}$ or $x = \boxed{5}$.", None),
    ("boxed-corrected", "First $\\boxed{12}$. Wait, doubling:\nso $\\boxed{24}$.", "24"),
    ("boxed-repeated-same", r"$\boxed{3}$, again $\boxed{3}$", "3"),
    ("answer-tag", "<think>hmm</think>\n<answer>42</answer>", "42"),
    ("answer-tag-dollars", "<answer>$\\frac{3}{4}$</answer>", r"\frac{3}{4}"),
    ("answer-tag-cut-off", "<answer>41</answer> retry <answer>42", None),
    ("gsm8k", "Natalia sold 48 clips.\n#### 72", "72"),
    ("gsm8k-commas-dollars", "#### $1,234", "1234"),
    ("minerva", "Final Answer: The final answer is $\\frac{1}{3}$. I hope it is correct.",
     r"\frac{1}{3}"),
    ("minerva-plain", "Final Answer: The final answer is 12. I hope it is correct.", "12"),
    ("minerva-cut-off", "Final Answer: The final answer is $72", None),
    ("minerva-hedged", "Final Answer: The final answer is $7$ or $8$. I hope it is correct.",
     None),
    ("answer-is", "So the answer is 5. Because 2+3=5.", "5"),
    ("answer-is-colon", "The answer is: 12", "12"),
    ("answer-is-parens", r"The answer is \(\frac{1}{2}\).", r"\frac{1}{2}"),
    ("answer-is-escaped-dollar", r"The answer is $\$18.90$.", r"\$18.90"),
    ("answer-is-display-next-line", "Thus the answer is\n\\[\n\\frac{3}{4}\n\\]", r"\frac{3}{4}"),
    ("answer-is-last", "The answer is 3. No wait, the answer is 4", "4"),
    ("answer-is-nothing", "The answer is", None),
    ("answer-colon", "We compute.\nAnswer: 17", "17"),
    ("answer-colon-markdown", "We compute.\n**Answer:** $17$", "17"),
    ("box-beats-answer-is", r"The answer is 3, i.e. \boxed{5}", "5"),
    ("gsm8k-beats-answer-is", "The answer is 3.\n#### 4", "4"),
    ("no-answer", "Betty has 72 dollars in total.", None),
    ("empty", "", None),
]


@pytest.mark.parametrize("name, completion, expected", CASES, ids=[c[0] for c in CASES])
def test_extract(name, completion, expected):
    assert extract.extract(completion) == expected


def test_search_after_think():
    text = "<think>maybe \\boxed{3}</think>\nSo the answer is \\boxed{4}."
    assert extract.extract(text) == "4"
    assert extract.extract("<think>the answer is \\boxed{3}", search="after_think") is None
    assert extract.extract("<think>the answer is \\boxed{3}", search="all") == "3"
    assert extract.extract("<think>x</think> nothing here") is None  # not the thoughts


def test_formats_pick_and_order():
    text = "The answer is 3.\n#### 4"
    assert extract.extract(text, formats="answer_is") == "3"
    assert extract.extract(text, formats="answer_is,gsm8k") == "3"
    assert extract.extract(text, formats="boxed") is None
    assert extract.extract("Answer: 9", formats="answer_colon") == "9"


@pytest.mark.parametrize("formats", ["boxd", "", "boxed,,latex"])
def test_unknown_format_raises(formats):
    with pytest.raises(RewardInputError, match="answer_formats"):
        extract.extract("x", formats=formats)


def test_unknown_search_raises():
    with pytest.raises(RewardInputError, match="search"):
        extract.extract("x", search="everywhere")


def test_linear_time_on_long_inputs():
    """300 KB of boxes and anchors: bounded work (last MAX_BOXES boxes compared)."""
    text = "\\boxed{1} the answer is 2\n" * 12_000
    assert extract.extract(text) == "1"
    assert extract.extract("\\boxed{" * 50_000 + "1") is None
