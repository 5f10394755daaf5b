"""LaTeX answer handling for the `math` verifier: boxes, normalisation, conversion.

* `last_boxed` finds the last `\\boxed{...}` / `\\fbox{...}` with brace
  matching (nested braces and boxes included), in one linear pass.
* `clean` / `canonical` normalise an answer string for the string-equality
  check (dollar signs, `\\left`/`\\right`, spacing commands, unit words,
  degrees, percent, `\\dfrac`/`\\tfrac`, `x = ...`, thousands commas).
* `split_tuple` splits "(1, 2)", "[0, 1)", "\\{1, 2\\}" or "1, 2" into
  elements at top-level commas.
* `to_plain` converts the supported LaTeX subset into the plain syntax of
  `rl.rewards.expression.parse`: `\\frac{a}{b}` (also `\\frac12`), `\\sqrt{x}`,
  `\\sqrt[n]{x}`, `^{...}`, `\\cdot`, `\\times`, `\\div`, `\\pi`, `\\infty`,
  Greek letters, `\\sin`-style functions, `\\operatorname{..}`, `\\mathrm{..}`,
  braces and brackets as grouping. Anything else (subscripts, `\\pm`,
  `\\cup`, `\\le`, matrices, `|x|`, ...) raises `LatexError`.
"""

from __future__ import annotations

import re

from rl.rewards.expression import CONSTANTS, FUNCTIONS, GREEK, normalize_unicode

MAX_DEPTH = 64

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])\.?")
_SPACING = re.compile(r"\\(?:[!,;: ]|quad(?![A-Za-z])|qquad(?![A-Za-z])|displaystyle(?![A-Za-z]))")
_SMALL_FRAC = re.compile(r"\\[dtc]frac(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ(?![A-Za-z])|°")
_TEXT = re.compile(
    r"\\(text|textbf|textrm|textit|mbox|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}"
    r"((?:\s*\^\s*\{?\s*[23]\s*\}?)?)")
_UNIT_WORDS = re.compile(r"[A-Za-z\s.]*")
_ASSIGNMENT = re.compile(r"^[A-Za-z]\s*=\s*(?=[^=]+$)")
_THOUSANDS = re.compile(r"-?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?")
_SPACES = re.compile(r"\s+")
_NAME = re.compile(r"[A-Za-z]+")

_COMMAND_TEXT = {"cdot": "*", "times": "*", "ast": "*", "div": "/", "%": "", "$": ""}
_COMMAND_TEXT.update({name: f" {name} " for name in set(FUNCTIONS) | GREEK | CONSTANTS})
_WRAPPERS = frozenset({"mathrm", "mathbf", "mathit", "operatorname", "text", "textrm",
                       "textbf", "mbox"})


class LatexError(ValueError):
    """The LaTeX uses something outside the supported subset."""


def brace_pairs(text: str) -> dict[int, int]:
    """Maps the index of every matched unescaped "{" to its "}" (one pass)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    escaped = False
    for i, c in enumerate(text):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c == "{":
            stack.append(i)
        elif c == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def braced(text: str, i: int) -> str | None:
    """The content of the brace group opening at `text[i]`; None if it never closes.

    Escaped braces (`\\{`) do not count. Linear in the group's length.
    """
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
        j += 1
    return None


def box_content(text: str, match: re.Match[str]) -> str | None:
    """The content of the box whose command `match` matched (see `last_boxed`)."""
    i = match.end()
    while i < len(text) and text[i].isspace():
        i += 1
    if i < len(text) and text[i] == "{":
        return braced(text, i)
    if i == match.end():  # "\boxedx": not a box
        return None
    token = re.match(r"[^\s$]+", text[i:])
    return token.group() if token else None


def boxes(text: str) -> list[re.Match[str]]:
    """Every `\\boxed` / `\\fbox` command in `text`, in order."""
    return list(_BOX.finditer(text))


def complete_box(text: str) -> bool:
    """`text` holds a `\\boxed{...}` (or `\\fbox{...}`) whose braces close: the tree
    sampler's stop rule (`sampling.tree_generate(..., stop_text=complete_box)`). Like
    the TreePO authors' `extract_last_boxed` pattern, only a braced box counts
    (`\\boxed 5` does not), and any complete box counts, not only the last one."""
    for match in boxes(text):
        rest = text[match.end():]
        if rest.lstrip().startswith("{") and box_content(text, match) is not None:
            return True
    return False


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed`/`\\fbox`; None if none or it is unclosed.

    `\\boxed{\\boxed{5}}` gives "5" (the inner box is the last one);
    `\\boxed 5` (no braces) gives the next whitespace-delimited token.
    """
    last = None
    for last in _BOX.finditer(text):
        pass
    return None if last is None else box_content(text, last)


def _replace_text(text: str) -> str:
    """Drops `\\text{unit words}` when other content remains, else unwraps it."""
    def unwrap(match: re.Match[str]) -> str:
        return f" {match.group(2)}{match.group(3)} "

    def drop_units(match: re.Match[str]) -> str:
        if match.group(1) in ("mathrm", "mathbf", "operatorname") \
                or not _UNIT_WORDS.fullmatch(match.group(2)):
            return unwrap(match)
        return " "

    dropped = _TEXT.sub(drop_units, text)
    return dropped if dropped.strip() else _TEXT.sub(unwrap, text)


def clean(text: str) -> str:
    """Normalised answer text, single-spaced (spaces kept to separate names)."""
    text = normalize_unicode(text).replace("\x00", "")
    boxed = last_boxed(text)
    if boxed is not None:
        text = boxed
    text = text.replace("\\$", "").replace("$", "")
    for delimiter in ("\\(", "\\)", "\\[", "\\]"):
        text = text.replace(delimiter, " ")
    text = _LEFT_RIGHT.sub(" ", text)
    text = _SPACING.sub(" ", text)
    text = _SMALL_FRAC.sub(r"\\frac", text)
    text = _DEGREES.sub("", text)
    text = text.replace("\\%", "").replace("%", "").replace("{,}", ",")
    text = _replace_text(text)
    text = _SPACES.sub(" ", text).strip()
    text = text.rstrip(". ")
    text = _ASSIGNMENT.sub("", text)
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    return text


def canonical(text: str) -> str:
    """`clean` without any whitespace: the form compared for string equality."""
    return _SPACES.sub("", clean(text))


def split_tuple(text: str) -> tuple[str, list[str]] | None:
    """(delimiters, elements) if `text` is a comma-separated tuple, set or list.

    Delimiters are the enclosing characters ("()", "[)", "{}", or "" for a
    bare list); returns None when there is no top-level comma.
    """
    delimiters, inner = "", text
    if text.startswith("\\{") and text.endswith("\\}"):
        delimiters, inner = "{}", text[2:-2]
    elif len(text) >= 2 and text[0] in "([" and text[-1] in ")]":
        depth = 0
        for i, c in enumerate(text):
            depth += (c in "([{") - (c in ")]}")
            if depth == 0 and i < len(text) - 1:
                break
        else:
            delimiters, inner = text[0] + text[-1], text[1:-1]
    elements, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        depth += (c in "([{") - (c in ")]}")
        if c == "," and depth == 0:
            elements.append(inner[start:i].strip())
            start = i + 1
    if not elements:
        return None
    elements.append(inner[start:].strip())
    return delimiters, elements


def _group(text: str, i: int) -> tuple[str, int]:
    """The content of the brace group opening at `text[i]` and the index after it."""
    content = braced(text, i)
    if content is None:
        raise LatexError("unbalanced braces")
    return content, i + len(content) + 2


def _command(text: str, i: int) -> tuple[str, int]:
    """The command name after the backslash at `text[i]` and the index after it."""
    match = _NAME.match(text, i + 1)
    if match:
        return match.group(), match.end()
    if i + 1 < len(text):
        return text[i + 1], i + 2
    raise LatexError("trailing backslash")


def _argument(text: str, i: int) -> tuple[str, int]:
    """A macro argument at `text[i]`: a brace group, a command, or one character."""
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        raise LatexError("missing argument")
    if text[i] == "{":
        return _group(text, i)
    if text[i] == "\\":
        _, end = _command(text, i)
        return text[i:end], end
    return text[i], i + 1


def _convert(text: str, depth: int) -> str:
    if depth > MAX_DEPTH:
        raise LatexError(f"nested deeper than {MAX_DEPTH}")
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            name, i = _command(text, i)
            if name == "frac":
                numerator, i = _argument(text, i)
                denominator, i = _argument(text, i)
                out.append(f"(({_convert(numerator, depth + 1)})"
                           f"/({_convert(denominator, depth + 1)}))")
            elif name == "sqrt":
                index = None
                if text.startswith("[", i):
                    close = text.find("]", i)
                    if close < 0:
                        raise LatexError("unclosed \\sqrt[")
                    index, i = text[i + 1:close], close + 1
                radicand, i = _argument(text, i)
                inner = _convert(radicand, depth + 1)
                out.append(f" sqrt({inner})" if index is None
                           else f" root({inner},{_convert(index, depth + 1)})")
            elif name in _WRAPPERS:
                content, i = _argument(text, i)
                out.append(f" {_convert(content, depth + 1)} ")
            elif name in _COMMAND_TEXT:
                out.append(_COMMAND_TEXT[name])
            else:
                raise LatexError(f"unsupported command \\{name}")
        elif c == "{":
            content, i = _group(text, i)
            out.append(f"({_convert(content, depth + 1)})")
        elif c in "}_|&":
            raise LatexError(f"unsupported {c!r}")
        else:
            out.append({"[": "(", "]": ")"}.get(c, c))
            i += 1
    return "".join(out)


def to_plain(text: str) -> str:
    """The supported LaTeX subset as plain `expression.parse` syntax.

    Raises LatexError for anything else. `^` followed by digits takes all of
    them (`2^10` is 1024, the plain-text reading, not LaTeX's `2^1 0`).
    """
    return _convert(text, 0)
