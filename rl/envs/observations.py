"""How a tool's output enters the conversation: the text around it, taken once from the
chat template, then tokenised once per reply and appended after the policy's turn.

    fmt = ObservationFormat.from_template(tokenizer)   # or ObservationFormat.plain()
    fmt.render(["56088"])    # '\\n<|im_start|>user\\n<tool_response>\\n56088\\n</tool_response>'
                             # '<|im_end|>\\n<|im_start|>assistant\\n' for a Qwen2.5 template

The policy's turn ends with its stop token (the template's end of an assistant message,
`<|im_end|>` or `<|eot_id|>`). What follows it in a conversation rendered by the
template, up to the next assistant header, is fixed text around the tool outputs:
`before` output₁ `between` output₂ ... `after`. `from_template` finds the three by
rendering a conversation with marker outputs, once. Templates that write a tool
message's content as JSON (Llama 3.1's writes a string output quoted) give `quote`:
each output is then JSON-encoded the same way. The conversation itself is never
rendered again: a reply is `render(outputs)` tokenised and appended to the row's
tokens, so the tokens the policy produced are never re-tokenised (the off-policy
drift a re-render brings).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

# a quote and a newline: a template that writes the content as JSON escapes them
_MARKS = ('@@tool-output-1"\n@@', '@@tool-output-2"\n@@')
_USER, _REPLY = "@@user@@", "@@assistant@@"


class TemplateError(ValueError):
    """The chat template cannot render tool outputs as fixed text around them."""


@dataclasses.dataclass(frozen=True)
class ObservationFormat:
    before: str
    between: str
    after: str
    quote: bool = False

    @classmethod
    def plain(cls) -> ObservationFormat:
        """For a tokenizer without a chat template (the embedded byte tokenizer): each
        output in `<tool_response>` tags on its own lines, then the policy goes on."""
        return cls("\n<tool_response>\n", "\n</tool_response>\n<tool_response>\n",
                   "\n</tool_response>\n")

    @classmethod
    def from_template(cls, tokenizer, role: str = "tool") -> ObservationFormat:
        """From `tokenizer`'s chat template, whose turn end is its eos token; `role`: the
        role of tool messages (`tool` for Qwen and Llama 3.1 templates)."""
        end = tokenizer.id_to_token(tokenizer.eos_id) if tokenizer.eos_id is not None else None
        if end is None:
            raise TemplateError("the tokenizer has no eos token to end the policy's turn")
        messages = [{"role": "user", "content": _USER}, {"role": "assistant", "content": _REPLY}]
        try:
            two = tokenizer.apply_chat_template(
                messages + [{"role": role, "content": m} for m in _MARKS],
                add_generation_prompt=True)
            one = tokenizer.apply_chat_template(
                messages + [{"role": role, "content": _MARKS[0]}], add_generation_prompt=True)
        except ValueError as e:
            raise TemplateError(f"the chat template cannot render {role!r} messages: {e}") from e
        suffixes = []
        for text in (two, one):
            start = text.find(_REPLY)
            cut = text.find(end, start)
            if start < 0 or cut < 0:
                raise TemplateError(f"the chat template does not end an assistant message "
                                    f"with the eos token {end!r}")
            suffixes.append(text[cut + len(end):])
        quote = suffixes[0].count(_MARKS[0]) == 0 and suffixes[0].count(_json(_MARKS[0])) == 1
        marks = [_json(m) for m in _MARKS] if quote else list(_MARKS)
        before, rest = _split(suffixes[0], marks[0])
        between, after = _split(rest, marks[1])
        fmt = cls(before, between, after, quote)
        if fmt.render([_MARKS[0]]) != suffixes[1]:
            raise TemplateError("the chat template renders one tool output differently from "
                                "two (not fixed text around each output)")
        return fmt

    def render(self, outputs: Sequence[str]) -> str:
        """The text appended after the policy's stop token for this turn's outputs."""
        if not outputs:
            raise ValueError("an observation needs at least one tool output")
        if self.quote:
            outputs = [_json(o) for o in outputs]
        return self.before + self.between.join(outputs) + self.after


def _json(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # as chat templates' tojson filter


def _split(text: str, mark: str) -> tuple[str, str]:
    if text.count(mark) != 1:
        raise TemplateError("the chat template does not render a tool message's content "
                            "verbatim")
    head, tail = text.split(mark)
    return head, tail
