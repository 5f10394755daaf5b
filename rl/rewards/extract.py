"""Where a completion states its final answer: the formats RLVR data uses.

    extract(completion)                                   # -> "5", or None
    extract(completion, formats="gsm8k,answer_is", search="all")

`search` picks the text to look in:

* `"after_think"` (default): the text after the last `</think>` when there is
  one; a `<think>` that is never closed means the reasoning was cut off, so
  there is no answer; without think tags, the whole completion.
* `"all"`: the whole completion.

`formats` is a comma-separated priority list; the first format that finds an
answer wins (later formats are not consulted), and within a format the last
occurrence counts:

* `boxed`         the last `\\boxed{...}` / `\\fbox{...}`, brace-matched. If the
                  last box is unclosed (a truncated completion) there is no
                  answer at all, whatever else the text says. If the boxes in
                  the text disagree (`\\boxed{3}` ... `\\boxed{5}`), the answer
                  is hedged: no answer.
* `answer_tag`    the last complete `<answer>...</answer>`; an `<answer>`
                  opened after it and never closed means no answer.
* `gsm8k`         the rest of the last line starting with `####`.
* `final_answer`  Minerva's "Final Answer: The final answer is X. I hope it is
                  correct." (the "I hope" sentence optional).
* `answer_is`     the rest of the line after the last "answer is"
                  (case-insensitive), a leading ":" dropped.
* `answer_colon`  the rest of the last line starting with "Answer:" (also
                  `**Answer:**`).

For the line-based formats the answer is the math between the first pair of
`$`/`$$`/`\\(...\\)`/`\\[...\\]` delimiters when the line starts with one, else
the text up to the first ". " (a sentence end); trailing `.`, spaces and `$`
are stripped. Linear-time scans only (no backtracking regexes on model text).
"""

from __future__ import annotations

import re

from rl.rewards import latex
from rl.rewards.common import RewardInputError, last_answer_tag

FORMATS = ("boxed", "answer_tag", "gsm8k", "final_answer", "answer_is", "answer_colon")
DEFAULT_FORMATS = ",".join(FORMATS)
SEARCHES = ("after_think", "all")
MAX_BOXES = 8  # the last boxes compared for hedging

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_ANSWER_IS = re.compile(r"answer is", re.IGNORECASE)
_FINAL = re.compile(r"final answer:?\s*the final answer is", re.IGNORECASE)
_ANSWER_COLON = re.compile(r"^[ \t*_#>]*answer[ \t*_]*:", re.IGNORECASE | re.MULTILINE)
_GSM8K = re.compile(r"^[ \t]*####", re.MULTILINE)
_HOPE = re.compile(r"\.?\s*I hope it is correct\.?\s*$", re.IGNORECASE)
_HEDGE = re.compile(r"\bor\b")  # "$7$ or $8$": another value offered
_MATH_OPEN = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))


def parse_formats(formats: str) -> tuple[str, ...]:
    """The format names of a comma-separated list; RewardInputError for an unknown one."""
    if not isinstance(formats, str):
        raise RewardInputError(f"option 'answer_formats' must be a str, got {formats!r}")
    names = tuple(f.strip() for f in formats.split(",") if f.strip())
    unknown = [f for f in names if f not in FORMATS]
    if unknown or not names:
        raise RewardInputError(f"answer_formats {formats!r}: unknown {unknown or 'empty'} "
                               f"(choose from {', '.join(FORMATS)})")
    return names


def check_search(search: object) -> str:
    if search not in SEARCHES:
        raise RewardInputError(f"option 'search' must be one of {', '.join(SEARCHES)}, "
                               f"got {search!r}")
    return str(search)


def region(completion: str, search: str = "after_think") -> str | None:
    """The text to look for the answer in (see the module docstring); None if cut off."""
    if search == "all":
        return completion
    close = completion.rfind("</think>")
    if close >= 0:
        return completion[close + len("</think>"):]
    return None if "<think>" in completion else completion


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = None
    for last in pattern.finditer(text):
        pass
    return last


def _closing(body: str, close: str) -> int:
    """Index of the first unescaped `close` in `body`, or -1."""
    i = body.find(close)
    while i > 0 and close == "$" and body[i - 1] == "\\":
        i = body.find(close, i + 1)
    return i


def _line_answer(rest: str) -> str | None:
    """The answer at the start of `rest` (the text after an anchor): see the module
    docstring. A math delimiter that never closes (cut off) or an "or" after the
    closing one (`$7$ or $8$`: hedged) gives None."""
    line, _, after = rest.partition("\n")
    line = line.strip().lstrip(":*_ \t").strip()
    if not line:  # "The answer is\n\\[ ... \\]": the display on the next lines
        following = after.lstrip()
        if not following.startswith(("$$", "\\[")):
            return None
        line, after = following, ""
    for open_, close in _MATH_OPEN:
        if line.startswith(open_):
            body = line[len(open_):] + ("\n" + after if open_ in ("$$", "\\[") else "")
            end = _closing(body, close)
            if end < 0:
                return None
            tail = body[end + len(close):].split("\n", 1)[0].split(". ", 1)[0]
            if _HEDGE.search(tail):
                return None
            line = body[:end]
            break
    else:
        line = line.split(". ", 1)[0]
    answer = line.strip().rstrip(".$ \t").strip().strip("$").strip()
    return answer or None


def _boxed(text: str) -> str | None | bool:
    """The last box's content; False when the text has no box; None if unclosed/hedged.

    An earlier box with another answer on the same line (no newline or ". " between
    them: `$\\boxed{3}$ or $\\boxed{5}$`) makes the answer hedged; one in an earlier
    sentence is a corrected first attempt and does not count."""
    found = latex.boxes(text)
    if not found:
        return False
    answer = latex.box_content(text, found[-1])
    if answer is None:
        return None
    final = latex.canonical(answer)
    for match in reversed(found[-MAX_BOXES:-1]):
        between = text[match.end():found[-1].start()]
        content = latex.box_content(text, match)
        if content is None or _encloses(content, answer):
            continue
        if "\n" in between.replace(content, "", 1) or ". " in between.replace(content, "", 1):
            break
        if content and final != latex.canonical(content):
            return None
    return answer


def _encloses(outer: str, inner: str) -> bool:
    """True for a box around the final one (`\\boxed{\\boxed{5}}`)."""
    return latex.last_boxed(outer) == inner


def _answer_tag(text: str) -> str | None | bool:
    if text.rfind("<answer>") > text.rfind("</answer>"):  # opened, never closed: cut off
        return None
    content = last_answer_tag(text)
    if content is None:
        return False
    content = content.strip()
    return (_line_answer(content) if "\n" not in content else content) or None


def _anchor(pattern: re.Pattern[str], text: str) -> str | None | bool:
    match = _last(pattern, text)
    if match is None:
        return False
    rest = text[match.end():]
    if pattern is _FINAL:
        rest = _HOPE.sub("", rest.split("\n", 1)[0])
    return _line_answer(rest)


def _gsm8k(text: str) -> str | None | bool:
    """The rest of the last `####` line, without `$`, `\\$` and thousands commas."""
    match = _last(_GSM8K, text)
    if match is None:
        return False
    line = text[match.end():].split("\n", 1)[0]
    answer = line.replace("\\$", "").replace("$", "").replace(",", "").strip().rstrip(".")
    return answer.strip() or None


def extract(completion: str, formats: str | tuple[str, ...] = DEFAULT_FORMATS,
            search: str = "after_think") -> str | None:
    """The completion's final answer text, or None (no answer, cut off, or hedged)."""
    names = parse_formats(formats) if isinstance(formats, str) else formats
    text = region(completion, check_search(search))
    if text is None:
        return None
    for name in names:
        if name == "boxed":
            found = _boxed(text)
        elif name == "answer_tag":
            found = _answer_tag(text)
        elif name == "gsm8k":
            found = _gsm8k(text)
        elif name == "final_answer":
            found = _anchor(_FINAL, text)
        elif name == "answer_is":
            found = _anchor(_ANSWER_IS, text)
        else:
            found = _anchor(_ANSWER_COLON, text)
        if found is not False:
            return found  # type: ignore[return-value]
    return None
